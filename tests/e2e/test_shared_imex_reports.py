"""A held IMEX session is told on every per-clique CD its node serves (issue 26, upstream #524).

Resident agents in the per-clique scope on three virtual nodes of one clique. Two CDs each run
a pod on node n01; the simulated IMEX there is then made to refuse the session (a
``session-in-use`` flag file; the shared IMEX's ``imexd.cfg.tmpl`` names the flag folder), as
a host ``nvidia-imex.service`` would, and the node's agent pod is deleted, so its replacement
starts the shared IMEX anew and is refused with ``NV_ERR_IN_USE``. Shown: a Warning
``ImexSessionInUse`` on the agent pod (naming the node and the fix), one on each CD, both CDs
NotReady with a message naming the node and the held session (the agent's
``compute-domains/imex-blocked.<index>`` note in the registry); once the flag goes, the
supervisor's next retry starts IMEX, both CDs are Ready and the note is gone.

The lost-peer half is ``test_shared_imex_peer_loss.py`` (process nodes: a virtual node's stop
lets its agent mark its entry NotReady, which is no power cut).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Node, Pod

from compute_domains.api import clique, computedomain, names, sharedimex
from compute_domains.daemon import events, imexconfig
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.e2e.test_seed_example import _eventually

pytestmark = pytest.mark.timeout(1200)
SHAPE = topology.Shape(racks=1, nodes_per_rack=3)
NODES_MODE = "virtual"
N0, N1 = "gb200-r0-n00", "gb200-r0-n01"
AGENT_LABELS = {"app.kubernetes.io/component": "imex-agent"}
SHARED = "var/lib/kubelet/plugins/compute-domain.nvidia.com/domains/shared-imex"


@pytest.fixture(scope="module")
def per_clique(rack_sim: state.SimPaths) -> Iterator[state.SimPaths]:
    """The sim with resident agents in the per-clique scope."""
    helpers.upgrade(rack_sim, "imex.agents=resident", "imex.scope=perClique")
    yield rack_sim


def _ready_condition(st: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), {})


async def _registry(admin: AsyncClient) -> clique.ComputeDomainClique | None:
    node = await admin.get(Node, N0)
    assert node.metadata is not None
    name = sharedimex.registry_name((node.metadata.labels or {})[names.GPU_CLIQUE_LABEL])
    found = [
        c
        async for c in admin.list(clique.ComputeDomainCliqueResource, namespace=DRIVER_NS)
        if c.metadata is not None and c.metadata.name == name
    ]
    return clique.ComputeDomainClique.from_resource(found[0]) if found else None


async def _registry_ready(admin: AsyncClient) -> bool:
    reg = await _registry(admin)
    return (
        reg is not None
        and len(reg.daemons) == 3
        and all(d.status.value == "Ready" for d in reg.daemons)
    )


async def _ready(admin: AsyncClient, cd: str, nodes: int) -> bool:
    st = await helpers.cd_status(admin, cd)
    entries = st.get("nodes") or []
    return (
        st.get("status") == "Ready"
        and len(entries) == nodes
        and all(n["status"] == "Ready" for n in entries)
    )


async def _events(
    admin: AsyncClient, namespace: str, name: str, reason: str = events.IMEX_SESSION_IN_USE
) -> list[Event]:
    return [
        e
        async for e in admin.list(Event, namespace=namespace, fields={"involvedObject.name": name})
        if e.reason == reason
    ]


async def _agent(admin: AsyncClient, node: str) -> Pod | None:
    pods = [
        p
        async for p in admin.list(Pod, namespace=DRIVER_NS, labels=AGENT_LABELS)
        if p.spec is not None and p.spec.nodeName == node
    ]
    live = [p for p in pods if p.metadata is not None and not p.metadata.deletionTimestamp]
    return live[0] if live else None


async def _cleanup(admin: AsyncClient, pods: list[str], cds: list[str]) -> None:
    for pod in pods:
        await admin.delete(Pod, pod, namespace="default")
    for cd in cds:
        await admin.delete(computedomain.ComputeDomainResource, cd, namespace="default")
    for cd in cds:
        await _eventually(
            lambda cd=cd: helpers.gone(admin, computedomain.ComputeDomainResource, cd),
            180,
            f"{cd} gone",
        )


async def test_a_held_session_is_told_on_every_cd_the_node_serves(
    admin: AsyncClient, per_clique: state.SimPaths
) -> None:
    await _eventually(lambda: _registry_ready(admin), 180, "the shared registry Ready")
    cds = ["inuse-a", "inuse-b"]
    for cd in cds:
        await helpers.create_cd(admin, cd)
        await admin.create(
            helpers.channel_pod(f"{cd}-pod", f"{cd}-rct", node=N1, command="sleep 3600")
        )
    for cd in cds:
        await _eventually(lambda cd=cd: _ready(admin, cd, 1), 300, f"{cd} Ready on {N1}")

    # A host nvidia-imex.service takes the session; the node's agent starts its IMEX anew.
    folder = per_clique.node_root(N1) / SHARED
    (folder / "faults").mkdir(exist_ok=True)
    (folder / "faults/session-in-use").touch()
    template = imexconfig.DEFAULT_TEMPLATE + "SIM_FAULT_DIR=/domains/shared-imex/faults\n"
    (folder / "imexd.cfg.tmpl").write_text(template)
    old = await _agent(admin, N1)
    assert old is not None and old.metadata is not None and old.metadata.name
    await admin.delete(Pod, old.metadata.name, namespace=DRIVER_NS)

    async def agent_event() -> Event | None:
        pod = await _agent(admin, N1)
        if pod is None or pod.metadata is None or pod.metadata.name == old.metadata.name:  # type: ignore[union-attr]
            return None
        found = await _events(admin, DRIVER_NS, str(pod.metadata.name))
        return found[0] if found else None

    event = await _eventually(agent_event, 180, "an ImexSessionInUse Event on the new agent pod")
    assert event.type == "Warning" and event.involvedObject.kind == "Pod"
    assert f"node {N1}" in (event.message or "")
    assert "systemctl disable --now nvidia-imex.service" in (event.message or "")

    async def told(cd: str) -> str:
        st = await helpers.cd_status(admin, cd)
        message = str(_ready_condition(st).get("message", ""))
        held = f"node {N1}: nvidia-imex cannot start" in message and "held" in message
        return message if st.get("status") == "NotReady" and held else ""

    for cd in cds:
        message = await _eventually(lambda cd=cd: told(cd), 120, f"{cd} naming the held session")
        assert "host nvidia-imex.service; disable and mask it" in message, message
        (on_cd,) = await _eventually(
            lambda cd=cd: _events(admin, "default", cd), 60, f"an ImexSessionInUse Event on {cd}"
        )
        assert on_cd.type == "Warning" and on_cd.involvedObject.kind == "ComputeDomain"
        assert f"node {N1}: nvidia-imex cannot start" in (on_cd.message or "")
    reg = await _registry(admin)
    assert reg is not None
    notes = [k for k in reg.metadata.annotations or {} if k.startswith("compute-domains/imex-")]
    assert notes == [sharedimex.blocked_key(reg.daemon(N1).index)], notes  # type: ignore[union-attr]

    (folder / "faults/session-in-use").unlink()  # the operator masked the host service
    for cd in cds:
        await _eventually(lambda cd=cd: _ready(admin, cd, 1), 180, f"{cd} Ready again")
    reg = await _registry(admin)
    assert reg is not None
    assert not [k for k in reg.metadata.annotations or {} if k.startswith("compute-domains/imex-")]
    (folder / "imexd.cfg.tmpl").unlink()
    await _cleanup(admin, [f"{cd}-pod" for cd in cds], cds)
