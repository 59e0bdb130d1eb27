"""The training framework's pure parts: pod names, the rank pod, when a rank's pod is lost."""

from __future__ import annotations

from typing import Any, cast

import pytest
from lightkube.resources.core_v1 import Pod

from compute_domains.sim import trainer

RACK = trainer.Rack("a", "uuid-a")
SETTINGS = trainer.TrainerSettings(racks=(RACK,), channel_template="cd-rct")


@pytest.mark.parametrize(
    ("rank", "generation", "name"),
    [
        (0, 0, "train-a-00"),
        (5, 0, "train-a-05"),
        (5, 1, "train-a-05-r1"),
        (15, 12, "train-a-15-r12"),
    ],
)
def test_pod_name(rank: int, generation: int, name: str) -> None:
    assert trainer.pod_name("a", rank, generation) == name


def test_rank_pod_is_the_guides_pod_pinned_to_its_rack() -> None:
    doc = trainer.rank_pod(SETTINGS, RACK, 5, 2).to_dict()
    assert doc["metadata"]["name"] == "train-a-05-r2"
    assert doc["metadata"]["labels"] == {
        "job": "training-job-2domain",
        "rack": "a",
        "rank": "5",
        "generation": "2",
    }
    spec = doc["spec"]
    assert spec["priorityClassName"] == "training-high-priority"
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "nvidia.com/gpu.clusteruuid", "operator": "In", "values": ["uuid-a"]}
    ]
    anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    assert anti[0]["labelSelector"]["matchExpressions"][0]["values"] == ["training-job-2domain"]
    ctr = spec["containers"][0]
    assert ctr["resources"] == {
        "limits": {"nvidia.com/gpu": 4},
        "claims": [{"name": "compute-domain-channel"}],
    }
    assert spec["resourceClaims"] == [
        {"name": "compute-domain-channel", "resourceClaimTemplateName": "cd-rct"}
    ]
    assert ctr["env"] == [
        {"name": "RANK", "value": "5"},
        {"name": "WORLD_SIZE", "value": "16"},
        {"name": "NCCL_MNNVL_ENABLE", "value": "2"},
    ]


def test_with_rdma_every_rank_claims_the_shared_template_and_ranks_count_in_domain_order() -> None:
    rack_b = trainer.Rack("b", "uuid-b")
    s = trainer.TrainerSettings(
        racks=(RACK, rack_b), channel_template="cd-rct", rdma_template="training-job-rdma"
    )
    spec = trainer.rank_pod(s, rack_b, 3, 0).to_dict()["spec"]
    ctr = spec["containers"][0]
    assert ctr["resources"]["claims"] == [{"name": "compute-domain-channel"}, {"name": "rdma-nics"}]
    assert spec["resourceClaims"][1] == {
        "name": "rdma-nics",
        "resourceClaimTemplateName": "training-job-rdma",
    }
    assert ctr["env"][:2] == [
        {"name": "RANK", "value": "19"},
        {"name": "WORLD_SIZE", "value": "32"},
    ]


def _pod(**extra: Any) -> Pod:
    doc: dict[str, Any] = {
        "metadata": {"name": "train-a-05"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }
    for key, value in extra.items():
        section, field = key.split("__")
        doc[section][field] = value
    return cast(Pod, Pod.from_dict(doc))


@pytest.mark.parametrize(
    ("pod", "nodes", "why"),
    [
        (_pod(), {"n1": True}, ""),
        (_pod(), {}, ""),
        (_pod(), {"n1": False}, "node n1 NotReady"),
        (_pod(status__phase="Failed"), {"n1": True}, "pod Failed"),
        (_pod(status__phase="Succeeded"), {"n1": True}, "pod Succeeded"),
        (
            _pod(metadata__deletionTimestamp="2026-12-01T00:00:00Z"),
            {"n1": True},
            "pod deleted (evicted, preempted or drained)",
        ),
        (_pod(spec__nodeName=None), {"n1": False}, ""),
    ],
)
def test_lost_reason(pod: Pod, nodes: dict[str, bool], why: str) -> None:
    assert trainer.lost_reason(pod, nodes) == why
