"""The sandbox of one pod on a simulated node, as the container runtime and kubelet set it up.

``view`` is the pod's sandbox as the runtime's NRI plugins see it. ``run`` is the runtime's
RunPodSandbox: the pod's network-namespace view (none with ``hostNetwork``), then each NRI
plugin's hook in order; a plugin's refusal fails the sandbox with the runtime's message (the
kubelet retries it). ``stop`` is StopPodSandbox: each plugin's hook (a failure is logged and
the pod stops anyway), then the view goes. ``write_hosts`` writes the pod's kubelet-managed
``/etc/hosts`` under the node's pod folder (``hosts_path``), which each container mounts.
Without NRI plugins ``run`` and ``stop`` do nothing. The pod worker (``pods.PodWorker``) calls
these, ``stop`` with its own logger (pod and node keys).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from compute_domains.sim.kubelet import nri, services


def view(
    root: Path, *, uid: str, namespace: str, name: str, ip: str, host_network: bool
) -> nri.Sandbox:
    """The pod's sandbox as the runtime's NRI plugins see it (``root``: the node's root)."""
    return nri.Sandbox(
        uid=uid,
        namespace=namespace,
        name=name,
        ip=ip,
        netns=None if host_network else root / nri.NETNS_DIR / uid,
    )


async def run(svc: services.NodeServices, sandbox: nri.Sandbox, *, host_network: bool) -> None:
    """The runtime's RunPodSandbox: the network-namespace view, then each NRI plugin's
    hook (a refusal fails the sandbox; the kubelet retries it)."""
    if not svc.nri_plugins:
        return
    if not host_network:
        await asyncio.to_thread(nri.make_netns, svc.root, sandbox.uid, sandbox.ip)
    for plugin in svc.nri_plugins:
        try:
            await plugin.run_pod_sandbox(sandbox)
        except nri.NriError as err:
            raise nri.NriError(
                "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to "
                f"create pod sandbox: NRI plugin {plugin.name} failed RunPodSandbox: {err}"
            ) from err


async def stop(
    svc: services.NodeServices, sandbox: nri.Sandbox, log: logging.LoggerAdapter[logging.Logger]
) -> None:
    """The runtime's StopPodSandbox: each NRI plugin's hook, then the view goes."""
    if not svc.nri_plugins:
        return
    for plugin in svc.nri_plugins:
        try:
            await plugin.stop_pod_sandbox(sandbox)
        except nri.NriError as err:
            # The runtime logs a plugin's StopPodSandbox failure and stops the pod anyway.
            log.warning("NRI plugin %s failed StopPodSandbox: %s", plugin.name, err)
    await asyncio.to_thread(nri.remove_netns, svc.root, sandbox.uid)


def hosts_path(root: Path, uid: str) -> Path:
    """The pod's ``/etc/hosts`` on the node (``root``: the node's root)."""
    return root / "var/lib/kubelet/pods" / uid / "etc-hosts"


def write_hosts(path: Path, *, hostname: str, ip: str) -> None:
    """Write the pod's kubelet-managed hosts file: localhost, then the pod's own name."""
    lines = [
        "# Kubernetes-managed hosts file.",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{ip}\t{hostname}",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
