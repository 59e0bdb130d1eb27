"""DRANET on the nodes of one node agent: what ``helm install dranet`` gives each node.

``install`` (run once by the sim's supervisor with admin credentials) creates what DRANET's
chart creates besides its DaemonSet: the ``dranet-system`` namespace, the ``dranet``
ServiceAccount and its ClusterRole/Binding (v1.3.0's rules). ``Dranet`` runs in the node
agent (the supervisor, or each node host): it acts as that ServiceAccount (a client certificate
for ``system:serviceaccount:dranet-system:dranet`` signed by the cluster's CA, so RBAC decides as
for the real pods), keeps one shared ``SlicePublisher``, and per running node lays out the NICs,
serves the node's kubelet plugin (``plugin``) and gives the node's runtime its NRI hooks
(``nri``). A node stop stops its plugin, as the machine's DRANET pod dies with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from pathlib import Path
from typing import Any, cast

from lightkube import AsyncClient, codecs

from compute_domains.infra import atomicfile, kube
from compute_domains.sim import pki, topology
from compute_domains.sim.dranet import inventory, nri, plugin, podconfig, publisher

logger = logging.getLogger(__name__)

NAMESPACE = "dranet-system"
SERVICE_ACCOUNT = "dranet"
USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"

_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceslices"],
        "verbs": ["list", "watch", "create", "update", "delete"],
    },
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims", "deviceclasses"],
        "verbs": ["get"],
    },
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims/status"],
        "verbs": ["patch", "update"],
    },
]


def manifests() -> list[dict[str, Any]]:
    """The objects DRANET v1.3.0's chart creates besides its DaemonSet."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "dranet"},
            "rules": _RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "dranet"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "dranet",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
            ],
        },
    ]


async def install(admin: AsyncClient) -> None:
    """Create DRANET's namespace, ServiceAccount and RBAC (server-side apply, idempotent)."""
    for doc in manifests():
        obj: Any = codecs.from_dict(doc)
        with kube.translated(f"installing DRANET's {doc['kind']} {doc['metadata']['name']}"):
            await admin.apply(obj, field_manager="dranet-install", force=True)


def client(pki_dir: Path, api_server: str, folder: Path) -> AsyncClient:
    """A client acting as DRANET's ServiceAccount (blocking: issues a certificate)."""
    ca = pki.KeyPair((pki_dir / "ca.crt").read_bytes(), (pki_dir / "ca.key").read_bytes())
    cert = pki.issue(
        ca,
        USER,
        organizations=("system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"),
        client=True,
    )
    path = folder / f"dranet-{os.getpid()}.kubeconfig"
    atomicfile.write_atomic(
        path,
        pki.kubeconfig(server=api_server, ca_pem=ca.cert_pem, client=cert, user=USER),
        mode=0o600,
        durable=False,
    )
    return kube.client(kube.KubeSettings(kubeconfig=path, field_manager=inventory.DRIVER))


@dataclasses.dataclass(slots=True)
class _NodeDranet:
    server: plugin.PluginServer
    hooks: nri.NriHooks


class Dranet:
    """DRANET for the nodes of one agent; ``run`` publishes slices until cancelled."""

    def __init__(self, api: AsyncClient) -> None:
        self._client = api
        self._get_claim = plugin.claim_getter(api)
        self._write_status = nri.status_writer(api)
        self._nics: dict[str, list[inventory.Nic]] = {}
        self._slices: dict[str, list[dict[str, Any]]] = {}
        self._nodes: dict[str, _NodeDranet] = {}
        self.publisher = publisher.SlicePublisher(api, self._slices.get)

    async def start_node(self, spec: topology.NodeSpec, node_root: Path) -> nri.NriHooks | None:
        """Lay out the node's NICs and serve its plugin; the runtime hooks (None: no NICs).

        Raises:
            OSError: the plugin's sockets cannot be created.
        """
        nics = inventory.nics(spec)
        if not nics:
            return None
        self._nics[spec.name] = nics
        self._slices[spec.name] = inventory.slice_devices(spec)
        await asyncio.to_thread(inventory.layout, node_root, nics)
        store = await asyncio.to_thread(podconfig.PodConfigStore, node_root)
        prep = plugin.Prepare(self._get_claim, spec.name, nics, store)
        server = plugin.PluginServer(node_root, prep)
        await server.start()
        hooks = nri.NriHooks(self._write_status, spec.name, node_root, store)
        self._nodes[spec.name] = _NodeDranet(server=server, hooks=hooks)
        return hooks

    def node_registered(self, name: str) -> None:
        """The node's Node object exists: publish its slice (owned by the Node)."""
        if name in self._slices:
            self.publisher.publish(name)

    async def stop_node(self, name: str) -> None:
        """The node stopped: its plugin goes (its slice stays, as on a real cluster)."""
        node = self._nodes.pop(name, None)
        if node is not None:
            await node.server.stop()
            await node.hooks.close()

    async def run(self) -> None:
        """Publish and keep the slices until cancelled; then stop every node's plugin."""
        try:
            await self.publisher.run()
        except Exception:
            # The agent does not await this task until it stops: say why slices stopped.
            logger.exception("DRANET's slice publisher failed")
            raise
        finally:
            for name in list(self._nodes):
                with contextlib.suppress(Exception):
                    await self.stop_node(name)
            await cast(Any, self._client).close()
