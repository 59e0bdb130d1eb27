"""A resident agent as the tests run it: in this process, with the IMEX stand-in in-process, for
a pod on a Node the test made (no kubelet serves it), and a prober that asks its ``/readyz``
over HTTP as a kubelet would."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.agent import app
from compute_domains.agent.config import AgentSettings, Domain
from compute_domains.api import names
from compute_domains.daemon import imexconfig
from compute_domains.daemon.config import DaemonSettings, HealthSettings, Identity, PeerSettings
from compute_domains.sim import imex_inproc
from compute_domains.sim.kubelet import probes
from tests.unit.sim.test_imex import _free_port

PROBE_PERIOD = 0.05
"""Seconds between two ``/readyz`` requests (a kubelet's readiness period, much shortened)."""


@contextlib.asynccontextmanager
async def clique_node(admin: AsyncClient, prefix: str, clique_id: str) -> AsyncIterator[str]:
    """A Node with clique ID ``clique_id`` and nothing asked of its agent; no kubelet serves it."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    labels = {names.GPU_CLIQUE_LABEL: clique_id}
    await admin.create(Node.from_dict({"metadata": {"name": name, "labels": labels}}))
    try:
        yield name
    finally:
        await admin.delete(Node, name)


async def agent_pod(admin: AsyncClient, ns: str, name: str, node: str, ip: str) -> Pod:
    """The agent's pod (it labels it; what it runs posts its Events on it): Running, with
    ``ip``, and no Ready condition (nothing but the test writes its status)."""
    pod = await admin.create(
        Pod.from_dict(
            {
                "metadata": {"name": name, "namespace": ns},
                "spec": {"nodeName": node, "containers": [{"name": "agent", "image": "x"}]},
            }
        )
    )
    status = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}
    await admin.patch(Pod.Status, name, {"status": status}, namespace=ns)
    return pod


def factory(tmp: Path, pod: Pod, ip: str) -> Callable[[Domain], DaemonSettings]:
    """The daemon settings of one domain, as ``cli.agent.factory`` builds them."""

    def build(domain: Domain) -> DaemonSettings:
        domain.domain_dir.mkdir(parents=True, exist_ok=True)
        ident = Identity(
            node_name=str(pod.spec.nodeName if pod.spec else ""),
            pod_name=str(pod.metadata.name if pod.metadata else ""),
            pod_namespace=str(pod.metadata.namespace if pod.metadata else ""),
            pod_uid=str(pod.metadata.uid if pod.metadata else ""),
            pod_ip=ip,
            clique_id=domain.assignment.clique_id,
            domain_uid=domain.assignment.domain_uid,
            domain_name=domain.name,
            domain_namespace=domain.namespace,
        )
        return DaemonSettings(
            identity=ident,
            max_nodes=2,
            imex=imexconfig.ImexFilesSettings(
                config_path=domain.domain_dir / "imexd.agent.cfg",
                nodes_config_path=domain.domain_dir / "nodes.cfg",
                template_path=None,
                server_port=_free_port((ip,)),
                cmd_port=_free_port((ip,)),
            ),
            health=HealthSettings(fast_interval=0.2, period=0.5),
            peers=PeerSettings(hosts_file=tmp / "hosts"),
        )

    return build


def agent(settings: AgentSettings, admin: AsyncClient, tmp: Path, pod: Pod) -> app.ResidentAgent:
    """The agent of ``pod``, its IMEX in-process, its hosts file in ``tmp``."""
    hosts = tmp / "hosts"

    def host_path(inside: Path) -> Path:
        return hosts if inside == Path("/etc/hosts") else inside

    return app.ResidentAgent(
        settings,
        admin,
        daemon_settings=factory(tmp, pod, settings.pod_ip),
        programs=imex_inproc.InProcessImex(host_path),
    )


class Prober:
    """Asks ``/readyz`` every ``PROBE_PERIOD`` and keeps every answer (True: it passed)."""

    def __init__(self, ip: str, port: int) -> None:
        self._ip = ip
        self._port = port
        self.answers: list[bool] = []
        self._new = asyncio.Condition()

    async def run(self) -> None:
        while True:
            code = await probes.http_get_status(
                self._ip, self._port, names.DAEMON_HEALTH_PATH, [], 1.0
            )
            async with self._new:
                self.answers.append(code is not None and 200 <= code < 400)
                self._new.notify_all()
            await asyncio.sleep(PROBE_PERIOD)  # the prober's period, not a synchronisation

    async def until(self, predicate: Callable[[list[bool]], bool], timeout: float) -> None:
        async with asyncio.timeout(timeout), self._new:
            await self._new.wait_for(lambda: predicate(self.answers))


async def until(predicate: Callable[[], bool], timeout: float) -> None:
    """Until ``predicate()`` holds (checked every 20 ms)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)
