"""Workload claims read from ResourceClaims: which CD, which node, which pods."""

from __future__ import annotations

from typing import Any

from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.api import names
from compute_domains.controller import claims


def _claim(
    *,
    kind: str = names.CHANNEL_CONFIG_KIND,
    driver: str = names.DRIVER_NAME,
    node: str | None = "n1",
    pool: str | None = None,
    pods: tuple[str, ...] = ("w-0",),
) -> dict[str, Any]:
    params = {"apiVersion": names.API_VERSION, "kind": kind, "domainID": "uid-1"}
    status: dict[str, Any] = {}
    if node is not None or pool is not None:
        allocation: dict[str, Any] = {"devices": {"results": []}}
        if node is not None:
            allocation["nodeSelector"] = {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        if pool is not None:
            allocation["devices"]["results"] = [
                {"request": "channel", "driver": driver, "pool": pool, "device": "channel-0"}
            ]
        status["allocation"] = allocation
        status["reservedFor"] = [{"resource": "pods", "name": p, "uid": f"u-{p}"} for p in pods]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {
            "devices": {
                "requests": [{"name": "channel", "exactly": {"deviceClassName": "x"}}],
                "config": [
                    {"requests": ["channel"], "opaque": {"driver": driver, "parameters": params}}
                ],
            }
        },
        "status": status,
    }


def test_a_channel_claim_names_its_domain_node_and_pods() -> None:
    for claim in (_claim(), ResourceClaim.from_dict(_claim())):
        assert claims.domain_uids(claim) == ("uid-1",)
        summary = claims.WorkloadClaim.from_claim(claim)
        assert summary == claims.WorkloadClaim(namespace="ns", name="c", node="n1", pods=("w-0",))
        assert summary.placed


def test_daemon_claims_and_other_drivers_are_not_workload_claims() -> None:
    assert claims.domain_uids(_claim(kind=names.DAEMON_CONFIG_KIND)) == ()
    assert claims.domain_uids(_claim(driver="gpu.nvidia.com")) == ()
    assert claims.domain_uids({"metadata": {"name": "x"}}) == ()


def test_the_node_comes_from_the_selector_or_our_pool() -> None:
    assert claims.allocated_node(_claim(node=None, pool="n2")) == "n2"
    assert claims.allocated_node(_claim(node=None, pool=None)) == ""
    pending = claims.WorkloadClaim.from_claim(_claim(node=None, pool=None))
    assert not pending.placed


def test_holder_pods() -> None:
    held = claims.WorkloadClaim(namespace="ns", name="c1", node="n1", pods=("b", "a"))
    orphan = claims.WorkloadClaim(namespace="ns", name="c2", node="n1")
    pending = claims.WorkloadClaim(namespace="ns", name="c3", node="", pods=("z",))
    assert claims.using_pods([held, orphan, pending]) == ["ns/a", "ns/b", "ns/c2 (claim)"]
