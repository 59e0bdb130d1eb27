"""The guide's §15.5 and §15.6 files (examples/guide/): the pieces the guide prints are there
unchanged, and the pods rebuilt from its text differ only where the guide says they do."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from compute_domains.bench import scenario
from compute_domains.sim import trainer

GUIDE = Path(__file__).resolve().parents[3] / "examples" / "guide"
DOMAIN_A, DOMAIN_B = scenario.GUIDE_UUIDS
CD = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomain",
    "metadata": {"name": "training-job-cd"},
    "spec": {
        "numNodes": 36,
        "channel": {"resourceClaimTemplate": {"name": "training-job-imex-channel"}},
    },
}
RDMA = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "training-job-rdma"},
    "spec": {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "rdma-nics",
                        "exactly": {"deviceClassName": "rdma-devices", "count": 4},
                    }
                ]
            }
        }
    },
}
CLAIMS = [
    {"name": "compute-domain-channel", "resourceClaimTemplateName": "training-job-imex-channel"},
    {"name": "rdma-nics", "resourceClaimTemplateName": "training-job-rdma"},
]


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((GUIDE / name).read_text()) if d]


def _uuid(pod: dict[str, Any]) -> str:
    term = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (expr,) = term["nodeSelectorTerms"][0]["matchExpressions"]
    assert (expr["key"], expr["operator"]) == ("nvidia.com/gpu.clusteruuid", "In")
    (value,) = expr["values"]
    return str(value)


def _without_rank(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod with what may differ between ranks (name, ClusterUUID, RANK) blanked."""
    out = copy.deepcopy(pod)
    out["metadata"]["name"] = ""
    term = out["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = []
    for env in out["spec"]["containers"][0]["env"]:
        if env["name"] == "RANK":
            env["value"] = ""
    return out


def test_15_5_is_the_printed_cd_and_template_and_36_pods_differing_in_domain_and_rank() -> None:
    docs = _docs("k8s134-nccl-2domain-computedomain-dranet.yaml")
    assert docs[:2] == [CD, RDMA]
    pods = docs[2:]
    assert [p["metadata"]["name"] for p in pods] == [f"train-{r}" for r in range(36)]
    assert [_uuid(p) for p in pods] == [DOMAIN_A] * 18 + [DOMAIN_B] * 18
    assert [p["spec"]["containers"][0]["env"][0] for p in pods] == [
        {"name": "RANK", "value": str(r)} for r in range(36)
    ]
    first = _without_rank(pods[0])
    assert all(_without_rank(p) == first for p in pods[1:])
    spec = pods[0]["spec"]
    assert spec["resourceClaims"] == CLAIMS
    anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["labelSelector"]["matchExpressions"][0]["values"] == ["training-job-2domain"]
    assert pods[0]["metadata"]["labels"] == {"job": "training-job-2domain"}
    ctr = spec["containers"][0]
    assert ctr["resources"] == {
        "limits": {"nvidia.com/gpu": 4},
        "claims": [{"name": "compute-domain-channel"}, {"name": "rdma-nics"}],
    }
    assert {"name": "WORLD_SIZE", "value": "36"} in ctr["env"]


def test_15_6_holds_the_printed_pieces_and_the_frameworks_own_rank_pods() -> None:
    docs = _docs(scenario.MANIFEST.removeprefix("examples/guide/"))
    kinds = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert kinds == [
        ("PriorityClass", "training-high-priority"),
        ("PriorityClass", "spare-low-priority"),
        ("ComputeDomain", scenario.CD_NAME),
        ("ResourceClaimTemplate", scenario.RDMA_TEMPLATE),
        ("Pod", "train-a-00"),
        ("Pod", "train-b-00"),
        ("Pod", "spare-a-0"),
        ("Pod", "spare-a-1"),
        ("Pod", "spare-b-0"),
        ("Pod", "spare-b-1"),
    ]
    assert docs[1] == {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "spare-low-priority"},
        "value": 100,
        "preemptionPolicy": "Never",
    }
    assert docs[0]["value"] > docs[1]["value"]
    assert docs[2:4] == [CD, RDMA]
    # The file's training pods are what the framework creates for rank 0 of each domain, so it
    # adopts them; the framework's pods carry the same RDMA claim.
    racks = (trainer.Rack("a", DOMAIN_A), trainer.Rack("b", DOMAIN_B))
    settings = trainer.TrainerSettings(
        racks=racks,
        channel_template=scenario.CHANNEL_TEMPLATE,
        rdma_template=scenario.RDMA_TEMPLATE,
    )
    for rack, pod in zip(racks, docs[4:6], strict=True):
        made = trainer.rank_pod(settings, rack, 0, 0).to_dict()
        made["metadata"].pop("namespace")
        assert {"apiVersion": "v1", "kind": "Pod", **made} == pod
        assert pod["spec"]["resourceClaims"] == CLAIMS
    for pod in docs[6:]:
        spec = pod["spec"]
        domain = DOMAIN_A if pod["metadata"]["name"].startswith("spare-a-") else DOMAIN_B
        assert spec["nodeSelector"] == {"nvidia.com/gpu.clusteruuid": domain}
        assert spec["priorityClassName"] == "spare-low-priority"
        assert "resourceClaims" not in spec
        (ctr,) = spec["containers"]
        assert ctr["image"] == "registry.k8s.io/pause:3.9"
        assert ctr["resources"] == {"limits": {"nvidia.com/gpu": 4}}
