"""Where the benchmark's workload pods go (bench/placement.py)."""

from __future__ import annotations

import pytest

from compute_domains.bench import placement


def _racks(racks: int, per_rack: int = 18, gpus: int = 4) -> list[placement.GpuNode]:
    return [
        placement.GpuNode(
            name=f"gb200-r{r}-n{i:02d}", cluster_uuid=f"uuid-{r}", clique=f"uuid-{r}.0", gpus=gpus
        )
        for r in range(racks)
        for i in range(per_rack)
    ]


def test_one_rack_keeps_the_seed_examples_form() -> None:
    groups = placement.plan(18, 1, _racks(2))
    assert groups == [placement.Group("", 18, {}, 4, clique_affinity=True)]


def test_more_than_a_rack_is_pinned_per_rack_by_cluster_uuid() -> None:
    groups = placement.plan(40, 1, _racks(3))
    assert [(g.replicas, g.node_selector, g.clique_affinity) for g in groups] == [
        (18, {placement.CLUSTER_UUID_LABEL: "uuid-0"}, False),
        (18, {placement.CLUSTER_UUID_LABEL: "uuid-1"}, False),
        (4, {placement.CLUSTER_UUID_LABEL: "uuid-2"}, False),
    ]
    assert len({g.suffix for g in groups}) == 3


def test_several_pods_per_node_are_pinned_per_node_and_share_its_gpus() -> None:
    groups = placement.plan(256, 4, _racks(4))
    assert len(groups) == 64
    assert {g.replicas for g in groups} == {4}
    assert {g.gpus_per_pod for g in groups} == {1}
    hosts = [g.node_selector[placement.HOSTNAME_LABEL] for g in groups]
    assert len(set(hosts)) == 64
    assert sum(h.startswith("gb200-r3-") for h in hosts) == 64 - 3 * 18


def test_non_fabric_nodes_are_never_used() -> None:
    plain = [placement.GpuNode(name="h200-0", cluster_uuid="", clique="", gpus=8)]
    with pytest.raises(placement.PlacementError, match="need 19 fabric nodes; the cluster has 18"):
        placement.plan(19, 1, _racks(1) + plain)


@pytest.mark.parametrize(
    ("pods", "per_node", "message"),
    [(10, 4, "whole multiple"), (6, 3, "do not split into 3 pods"), (0, 1, "whole multiple")],
)
def test_shapes_that_cannot_be_placed_say_why(pods: int, per_node: int, message: str) -> None:
    with pytest.raises(placement.PlacementError, match=message):
        placement.plan(pods, per_node, _racks(1))


def test_manifests_label_every_pod_and_hold_every_replica() -> None:
    groups = placement.plan(8, 4, _racks(1))
    cd, deps = placement.manifests(8, "ns", "cd-8", groups)
    assert cd["spec"]["channel"]["resourceClaimTemplate"]["name"] == "cd-8-rct"
    assert [d.spec.replicas for d in deps if d.spec] == [4, 4]
    for dep in deps:
        assert dep.spec is not None and dep.spec.template.spec is not None
        assert dep.spec.template.metadata is not None
        assert (dep.spec.template.metadata.labels or {})["bench"] == "cd-8"
        limits = dep.spec.template.spec.containers[0].resources
        assert limits is not None and (limits.limits or {})["nvidia.com/gpu"] == 1
    with pytest.raises(ValueError, match="hold 8 pods, not 9"):
        placement.manifests(9, "ns", "cd-8", groups)
