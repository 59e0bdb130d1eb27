"""Upstream A1-A3 "IMEX channel injection" (``test_cd_imex_chan_inject.bats``, ``test_cd_misc``).

One simulated GB200 node with the chart-installed driver. Each scenario applies upstream's
``channel-injection*.yaml`` shape with ``kubectl apply -f``: a ComputeDomain with ``numNodes: 1``
and a pod that lists ``/dev/nvidia-caps-imex-channels``. Upstream's limits hold: the pod is Ready
within 100 s (80 s in All mode), its ``kubectl logs`` name the injected channels, and after
``kubectl delete -f`` the pod is gone within 10 s and the ComputeDomain is deleted too.

A3 reinstalls with ``featureGates.ComputeDomainCliques=true`` upstream; here ComputeDomainCliques
is the only mode (no feature gate), so A3 repeats the A1 cycle after a chart reinstall and
checks what the gate switches on: the ComputeDomainClique ``<cdUID>.<cliqueID>`` in the driver
namespace lists the node Ready while the pod runs, and is gone after the delete.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.api import clique, computedomain, names, sharedimex
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS

pytestmark = pytest.mark.timeout(900)
SHAPE = topology.Shape(racks=1, nodes_per_rack=1)
CHANNELS = re.compile(r"\bchannel(\d+)$", re.MULTILINE)
"""A channel device as ``ls -la`` lists it (the last word of its line)."""


def _manifest(tmp_path: Path, cd: str, template: str, mode: str | None) -> Path:
    """Upstream's ``demo/specs/imex/channel-injection[-all].yaml`` (ComputeDomain + pod)."""
    channel: dict[str, object] = {"resourceClaimTemplate": {"name": template}}
    if mode is not None:
        channel["allocationMode"] = mode
    docs = [
        {
            "apiVersion": names.API_VERSION,
            "kind": "ComputeDomain",
            "metadata": {"name": cd, "namespace": "default"},
            "spec": {"numNodes": 1, "channel": channel},
        },
        helpers.channel_pod(cd, template).to_dict(),
    ]
    path = tmp_path / f"{cd}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


async def _apply_check_delete(
    admin: AsyncClient,
    sim: state.SimPaths,
    manifest: Path,
    pod: str,
    *,
    ready_s: float,
    expect: tuple[str, ...] = (),
    single: bool = False,
) -> None:
    """Upstream's ``apply_check_delete_workload_imex_chan_inject``; ``single``: the pod lists
    exactly one channel, its scope's (``helpers.expected_channel``: channel0 per domain)."""
    helpers.kubectl(sim, "apply", "-f", str(manifest))
    await helpers.within(ready_s, lambda: helpers.pod_ready(admin, pod), f"pod {pod} Ready")
    if single:
        found = await admin.get(Pod, pod, namespace="default")
        cd = await admin.get(computedomain.ComputeDomainResource, pod, namespace="default")
        channel = await helpers.expected_channel(
            admin,
            str(cd.metadata.uid),  # type: ignore[union-attr]
            str(found.spec.nodeName),  # type: ignore[union-attr]
        )
        expect = (*expect, f"channel{channel}")
    logs = await helpers.log_with(admin, pod, expect)
    if single:
        assert CHANNELS.findall(logs) == [str(channel)], logs
    helpers.kubectl(sim, "delete", "-f", str(manifest), "--wait=false")
    await helpers.within(10, lambda: helpers.gone(admin, Pod, pod), f"pod {pod} gone")
    await helpers.within(
        60,
        lambda: helpers.gone(admin, computedomain.ComputeDomainResource, pod),
        f"ComputeDomain {pod} deleted",
    )


async def test_a1_single_channel_injected(
    admin: AsyncClient, rack_sim: state.SimPaths, tmp_path: Path
) -> None:
    """A1 "CDs: IMEX channel injection (single)": channel0 only, Ready <=100 s, gone <=10 s.
    In the per-clique scope the one channel is the CD's own number (from 1), never 0."""
    cd = "imex-channel-injection"
    await _apply_check_delete(
        admin,
        rack_sim,
        _manifest(tmp_path, cd, "imex-channel-0", None),
        cd,
        ready_s=100,
        single=True,  # Single mode: its one channel and nothing else
    )


async def test_a2_all_channels_injected(
    admin: AsyncClient, rack_sim: state.SimPaths, tmp_path: Path
) -> None:
    """A2 "CDs: IMEX channel injection (all)": 2048 channels incl. channel222 and channel2047."""
    if helpers.per_clique():
        pytest.skip(
            "per-clique scope: allocationMode All would hold every channel of the clique's "
            "shared IMEX domain, so it is refused by design (decision 0015; shown by "
            "test_per_clique.py::test_allocation_mode_all_is_refused_in_this_scope)"
        )
    cd = "imex-channel-injection-all"
    await _apply_check_delete(
        admin,
        rack_sim,
        _manifest(tmp_path, cd, "tpl-imex-channels", "All"),
        cd,
        ready_s=80,
        expect=("channel0", "channel222", "channel2047"),
    )


async def test_a3_channel_injection_with_cliques(
    admin: AsyncClient, rack_sim: state.SimPaths, tmp_path: Path
) -> None:
    """A3 "CDs: IMEX channel injection (featureGates.ComputeDomainClique=true)"."""
    helpers.upgrade(rack_sim, "logVerbosity=debug")
    cd = "imex-channel-injection"
    manifest = _manifest(tmp_path, cd, "imex-channel-0", None)
    helpers.kubectl(rack_sim, "apply", "-f", str(manifest))
    await helpers.within(100, lambda: helpers.pod_ready(admin, cd), "pod Ready")
    uid = (
        await admin.get(computedomain.ComputeDomainResource, cd, namespace="default")
    ).metadata.uid  # type: ignore[union-attr]
    gpu_nodes = admin.list(Node, labels={names.GPU_PRESENT_LABEL: "true"})
    node = next(iter([n async for n in gpu_nodes]))  # not the control-plane node
    channel = await helpers.expected_channel(admin, str(uid), str(node.metadata.name))  # type: ignore[union-attr]
    await helpers.log_with(admin, cd, (f"channel{channel}",))
    labels = node.metadata.labels or {}  # type: ignore[union-attr]
    if helpers.per_clique():
        await _a3_per_clique(admin, rack_sim, manifest, str(uid), node)
        return
    name = names.clique_object_name(str(uid), labels[names.GPU_CLIQUE_LABEL])

    async def clique_lists_node_ready() -> bool:
        obj = await admin.get(clique.ComputeDomainCliqueResource, name, namespace=DRIVER_NS)
        daemons = obj.to_dict().get("daemons") or []  # type: ignore[no-untyped-call]
        return [(d["nodeName"], d["status"]) for d in daemons] == [(node.metadata.name, "Ready")]  # type: ignore[union-attr]

    await helpers.within(30, clique_lists_node_ready, f"clique {name} lists the node Ready")

    helpers.kubectl(rack_sim, "delete", "-f", str(manifest), "--wait=false")
    await helpers.within(10, lambda: helpers.gone(admin, Pod, cd), "pod gone")
    await helpers.within(
        60,
        lambda: helpers.gone(admin, clique.ComputeDomainCliqueResource, name, DRIVER_NS),
        f"clique {name} gone",
    )


async def _a3_per_clique(
    admin: AsyncClient, sim: state.SimPaths, manifest: Path, uid: str, node: Node
) -> None:
    """A3 in the per-clique scope, where the clique object is the clique's shared registry
    (no per-CD clique, decision 0015): it lists the node Ready and holds the CD's channel while
    the pod runs; after the delete the registry stays (its IMEX runs for good) without it."""
    labels = node.metadata.labels or {}  # type: ignore[union-attr]
    name = sharedimex.registry_name(labels[names.GPU_CLIQUE_LABEL])
    cd = "imex-channel-injection"

    async def registry() -> dict[str, Any]:
        obj = await admin.get(clique.ComputeDomainCliqueResource, name, namespace=DRIVER_NS)
        return obj.to_dict()  # type: ignore[no-any-return, no-untyped-call]

    async def lists_node_ready() -> bool:
        doc = await registry()
        daemons = [(d["nodeName"], d["status"]) for d in doc.get("daemons") or []]
        held = sharedimex.channels(doc["metadata"].get("annotations"))
        return daemons == [(labels["kubernetes.io/hostname"], "Ready")] and uid in held

    await helpers.within(
        30, lists_node_ready, f"registry {name} lists the node Ready, CD's channel"
    )
    helpers.kubectl(sim, "delete", "-f", str(manifest), "--wait=false")
    await helpers.within(10, lambda: helpers.gone(admin, Pod, cd), "pod gone")

    async def released() -> bool:
        doc = await registry()
        return uid not in sharedimex.channels(doc["metadata"].get("annotations"))

    await helpers.within(60, released, f"the CD's channel gone from registry {name}")
    await helpers.within(
        60,
        lambda: helpers.gone(admin, computedomain.ComputeDomainResource, cd),
        f"ComputeDomain {cd} deleted",
    )
