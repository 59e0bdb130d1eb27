"""Where the benchmark's workload pods go (bench/placement.py)."""

from __future__ import annotations

import copy
from typing import Any

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
    assert cd is not None
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


def _pod_spec(dep: object) -> dict[str, Any]:
    spec = dep.spec.template.spec  # type: ignore[attr-defined]
    out: dict[str, Any] = spec.to_dict()
    return out


def _without_domain(spec: dict[str, Any], *, affinity: bool) -> dict[str, Any]:
    """A claims pod spec less what the other workloads leave out (deep copy)."""
    out = copy.deepcopy(spec)
    out.pop("resourceClaims")
    out["containers"][0]["resources"].pop("claims")
    if not affinity:
        out.pop("affinity", None)
    return out


@pytest.mark.parametrize(
    ("pods", "per_node", "racks"),
    [(18, 1, 2), (40, 1, 3), (8, 4, 1)],
    ids=["one rack, affinity", "pinned per rack", "per node"],
)
def test_workloads_without_a_domain_are_the_same_pods_less_claim_and_affinity(
    pods: int, per_node: int, racks: int
) -> None:
    groups = placement.plan(pods, per_node, _racks(racks))
    cd, claims = placement.manifests(pods, "ns", "w", groups, placement.Workload.CLAIMS)
    assert cd is not None and cd["metadata"]["name"] == "w"
    specs = {
        w: [_pod_spec(d) for d in placement.manifests(pods, "ns", "w", groups, w)[1]]
        for w in placement.Workload
    }
    for claims_spec, affinity_spec, plain_spec in zip(
        specs[placement.Workload.CLAIMS],
        specs[placement.Workload.AFFINITY],
        specs[placement.Workload.PLAIN],
        strict=True,
    ):
        assert claims_spec["resourceClaims"] == [
            {"name": "cd", "resourceClaimTemplateName": "w-rct"}
        ]
        assert claims_spec["containers"][0]["resources"]["claims"] == [{"name": "cd"}]
        for spec in (affinity_spec, plain_spec):
            assert "resourceClaims" not in spec
            assert "claims" not in spec["containers"][0]["resources"]
        assert "affinity" not in plain_spec
        assert ("affinity" in affinity_spec) == ("affinity" in claims_spec)
        assert affinity_spec == _without_domain(claims_spec, affinity=True)
        assert plain_spec == _without_domain(claims_spec, affinity=False)
    # Everything around the pod spec (names, labels, replicas) is the same in every workload.
    for w in (placement.Workload.AFFINITY, placement.Workload.PLAIN):
        cd, deps = placement.manifests(pods, "ns", "w", groups, w)
        assert cd is None
        for dep, ref in zip(deps, claims, strict=True):
            mine, theirs = dep.to_dict(), ref.to_dict()
            mine["spec"]["template"].pop("spec")
            theirs["spec"]["template"].pop("spec")
            assert mine == theirs


def test_only_the_one_rack_claims_and_affinity_pods_carry_the_clique_affinity() -> None:
    one_rack = placement.plan(18, 1, _racks(2))
    for w, has in [
        (placement.Workload.CLAIMS, True),
        (placement.Workload.AFFINITY, True),
        (placement.Workload.PLAIN, False),
    ]:
        spec = _pod_spec(placement.manifests(18, "ns", "w", one_rack, w)[1][0])
        assert ("affinity" in spec) is has, w
        assert "nodeSelector" not in spec  # one rack: the GPU limits put one pod on each node
        assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 4}
        assert spec["containers"][0]["command"] == ["mnnvl-workload"]
    pinned = placement.plan(40, 1, _racks(3))
    for w in placement.Workload:
        specs = [_pod_spec(d) for d in placement.manifests(40, "ns", "w", pinned, w)[1]]
        assert [s["nodeSelector"] for s in specs] == [
            {placement.CLUSTER_UUID_LABEL: f"uuid-{r}"} for r in range(3)
        ]
        assert all("affinity" not in s for s in specs)
