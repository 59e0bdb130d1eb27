"""Each simulated node's host: its root folder, the files a GB200 host has, its credentials.

``prepare_root`` lays out a node's "host" filesystem: kubelet folders, CDI folders, a boot id
(new at each reboot, when the tmpfs ``/var/run`` is emptied too) and, on GPU nodes, the NVIDIA
driver installation with its procfs stand-ins (``sim.driverroot``). ``credentials`` issues the
node's kubelet client certificate (its kubeconfig, ``system:node:<name>``) and serving
certificate from the sim's CA. ``host_kubeconfig`` issues the node host's own reader identity
(``system:masters``) for the caches it shares among its nodes (``sim.agent``). Nothing here
runs a node; ``agent.NodeAgent`` calls these (off the event loop: they write files).

Node roots live under a short ``/tmp/cd-<hash>/`` folder because unix socket paths of kubelet
plugins must stay under 108 bytes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path

from compute_domains.infra import atomicfile
from compute_domains.sim import driverroot, pki, topology
from compute_domains.sim.kubelet import server
from compute_domains.sim.nvml import config as nvml_config


def nodes_base(sim_root: Path) -> Path:
    """Short folder holding every node root of one sim."""
    digest = hashlib.sha256(str(sim_root.resolve()).encode()).hexdigest()[:8]
    return Path("/tmp") / f"cd-{digest}"


def prepare_base(sim_root: Path) -> Path:
    """Create the nodes' short folder and the sim folder's ``nodes`` link to it."""
    base = nodes_base(sim_root)
    base.mkdir(parents=True, exist_ok=True)
    link = sim_root / "nodes"
    if not link.is_symlink():
        link.symlink_to(base)
    return base


def prepare_root(
    root: Path, spec: topology.NodeSpec, *, new_boot: bool, nvml_lib_dir: Path | None
) -> Path:
    """Lay out one node's root folder ``root`` (a new boot id with ``new_boot``); with
    ``nvml_lib_dir``, the NVML stand-in goes into its driver root. Returns ``root``."""
    for sub in (
        "var/lib/kubelet/plugins",
        "var/lib/kubelet/plugins_registry",
        "var/run/cdi",
        "etc/cdi",
        "var/log/pods",
        "proc/sys/kernel/random",
        "etc/kubernetes",
        "containers",
    ):
        (root / sub).mkdir(parents=True, exist_ok=True)
    boot = root / "proc/sys/kernel/random/boot_id"
    if new_boot:
        # /var/run is a tmpfs: a reboot empties it (pod network namespaces, DRANET's store).
        shutil.rmtree(root / "var/run/netns", ignore_errors=True)
        shutil.rmtree(root / "var/run/dranet", ignore_errors=True)
    if new_boot or not boot.exists():
        atomicfile.write_atomic(boot, f"{uuid.uuid4()}\n", durable=False)
    lib = nvml_lib_dir
    if spec.gpus:  # the control-plane node has no GPU, hence no NVIDIA driver
        driverroot.layout(
            root,
            topology.nvml_for(spec),
            None if lib is None else lib / nvml_config.LIBRARY_NAME,
        )
    return root


def _ca(pki_dir: Path) -> pki.KeyPair:
    return pki.KeyPair((pki_dir / "ca.crt").read_bytes(), (pki_dir / "ca.key").read_bytes())


def credentials(
    root: Path, spec: topology.NodeSpec, *, pki_dir: Path, api_server: str, fresh: bool
) -> tuple[Path, server.TlsFiles]:
    """The node's kubeconfig and the kubelet's serving TLS files under ``root``, issued
    anew from the CA in ``pki_dir`` when ``fresh``."""
    ca = _ca(pki_dir)
    kc = root / "etc/kubernetes/kubelet.conf"
    if fresh:
        client = pki.issue(
            ca, f"system:node:{spec.name}", organizations=("system:nodes",), client=True
        )
        kc.touch(mode=0o600)
        kc.write_text(
            pki.kubeconfig(
                server=api_server,
                ca_pem=ca.cert_pem,
                client=client,
                user=f"system:node:{spec.name}",
            )
        )
        serving = pki.issue(
            ca, spec.name, server=True, dns_names=(spec.name,), ip_addresses=(spec.address,)
        )
        serving.write(root / "etc/kubernetes", "kubelet")
        (root / "etc/kubernetes/ca.crt").write_bytes(ca.cert_pem)
    tls = server.TlsFiles(
        cert=root / "etc/kubernetes/kubelet.crt",
        key=root / "etc/kubernetes/kubelet.key",
        ca=root / "etc/kubernetes/ca.crt",
    )
    return kc, tls


def host_kubeconfig(base: Path, *, pki_dir: Path, api_server: str) -> Path:
    """The kubeconfig of this process's shared caches (``sim.agent``): a client certificate
    of the sim's CA in ``system:masters``, written under ``base``."""
    ca = _ca(pki_dir)
    ident = f"compute-domains:node-host:{os.getpid()}"
    kc = base / f"node-host-{os.getpid()}.conf"
    kc.touch(mode=0o600)
    kc.write_text(
        pki.kubeconfig(
            server=api_server,
            ca_pem=ca.cert_pem,
            client=pki.issue(ca, ident, organizations=("system:masters",), client=True),
            user=ident,
        )
    )
    return kc
