"""The job's objects as the deployment guide writes them (shared/seeds/002 §15.5, §15.6 rule 3)."""

from __future__ import annotations

from typing import Any

import pytest

from compute_domains.jobs import plan
from compute_domains.jobs import spec as specs

A = "804c7837-0000-4000-8000-00000000000a"
B = "89164aa7-0000-4000-8000-00000000000b"


def _job(*counts: tuple[str, int], **kw: Any) -> specs.JobSpec:
    domains = tuple(specs.Domain(cluster_uuid=u, node_count=n) for u, n in counts)
    return specs.JobSpec(name="training-job", domains=domains, **kw)


def _guide_affinity(uuid: str) -> dict[str, Any]:
    """§15.5's affinity, field for field (its job label value is the job's name here)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "nvidia.com/gpu.clusteruuid",
                                "operator": "In",
                                "values": [uuid],
                            }
                        ]
                    }
                ]
            }
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchExpressions": [
                            {"key": "job", "operator": "In", "values": ["training-job"]}
                        ]
                    },
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        },
    }


def test_two_domains_give_the_guides_compute_domain_over_both() -> None:
    cd = plan.plan(_job((A, 18), (B, 18))).compute_domain.to_dict()
    assert cd["apiVersion"] == "resource.nvidia.com/v1beta1"
    assert cd["kind"] == "ComputeDomain"
    assert cd["metadata"]["name"] == "training-job-cd"
    assert cd["spec"] == {
        "numNodes": 36,
        "channel": {
            "resourceClaimTemplate": {"name": "training-job-imex-channel"},
            "allocationMode": "Single",
        },
    }


def test_the_compute_domain_carries_the_jobs_record() -> None:
    job = _job((A, 2), (B, 3), command=("mnnvl-workload",), priority_class="high")
    cd = plan.compute_domain(job).to_dict()
    assert specs.from_record(cd["metadata"]["annotations"][plan.JOB_ANNOTATION]) == job


def test_the_shared_rdma_template_is_the_guides() -> None:
    rct = plan.plan(_job((A, 18), (B, 18))).rdma_template
    assert rct is not None
    doc = rct.to_dict()
    assert doc["apiVersion"] == "resource.k8s.io/v1"
    assert doc["kind"] == "ResourceClaimTemplate"
    assert doc["metadata"]["name"] == "training-job-rdma"
    assert doc["spec"] == {
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
    }


def test_every_pod_has_the_guides_affinity_claims_and_gpus() -> None:
    pods = plan.plan(_job((A, 18), (B, 18))).pods
    assert len(pods) == 36
    for rank, pod in enumerate(pods):
        doc = pod.to_dict()
        uuid = A if rank < 18 else B
        assert doc["metadata"]["name"] == f"training-job-{rank}"
        assert doc["spec"]["affinity"] == _guide_affinity(uuid)
        assert doc["spec"]["resourceClaims"] == [
            {
                "name": "compute-domain-channel",
                "resourceClaimTemplateName": "training-job-imex-channel",
            },
            {"name": "rdma-nics", "resourceClaimTemplateName": "training-job-rdma"},
        ]
        (ctr,) = doc["spec"]["containers"]
        assert ctr["resources"] == {
            "limits": {"nvidia.com/gpu": "4"},
            "claims": [{"name": "compute-domain-channel"}, {"name": "rdma-nics"}],
        }
        assert {e["name"]: e["value"] for e in ctr["env"]} == {
            "RANK": str(rank),
            "WORLD_SIZE": "36",
        }
        assert doc["metadata"]["labels"] == {
            "job": "training-job",
            plan.RANK_LABEL: str(rank),
            plan.GENERATION_LABEL: "0",
            plan.DOMAIN_LABEL: uuid,
        }


def _without_identity(doc: dict[str, Any]) -> dict[str, Any]:
    """A pod's dict less what differs between ranks: name, rank, domain."""
    doc["metadata"].pop("name")
    doc["metadata"]["labels"].pop(plan.RANK_LABEL)
    doc["metadata"]["labels"].pop(plan.DOMAIN_LABEL)
    doc["spec"]["containers"][0]["env"] = [
        e for e in doc["spec"]["containers"][0]["env"] if e["name"] != "RANK"
    ]
    doc["spec"]["affinity"]["nodeAffinity"] = None
    return doc


def test_pods_differ_only_in_rank_and_cluster_uuid() -> None:
    pods = [p.to_dict() for p in plan.plan(_job((A, 2), (B, 2))).pods]
    assert pods[0] != pods[3]
    first = _without_identity(pods[0])
    assert all(_without_identity(p) == first for p in pods[1:])


@pytest.mark.parametrize(
    ("counts", "want"),
    [
        pytest.param(((A, 2), (B, 2)), [A, A, B, B], id="2+2"),
        pytest.param(((B, 1), (A, 3)), [B, A, A, A], id="order-given-not-sorted"),
        pytest.param(
            ((A, 3), (B, 1), ("c" * 36, 2)), [A, A, A, B, "c" * 36, "c" * 36], id="3-domains"
        ),
        pytest.param(((A, 1),), [A], id="one-node"),
    ],
)
def test_ranks_fill_the_domains_in_the_order_given(
    counts: tuple[tuple[str, int], ...], want: list[str]
) -> None:
    pods = plan.plan(_job(*counts)).pods
    pinned = [
        p.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[  # type: ignore[union-attr]
            0
        ]
        .matchExpressions[0]  # type: ignore[index]
        .values
        for p in pods
    ]
    assert pinned == [[u] for u in want]
    assert [p.metadata.labels[plan.RANK_LABEL] for p in pods] == [  # type: ignore[union-attr,index]
        str(r) for r in range(len(want))
    ]


def test_without_rdma_there_is_no_template_and_only_the_channel_claim() -> None:
    objects = plan.plan(_job((A, 2), (B, 2), rdma=False))
    assert objects.rdma_template is None
    for pod in objects.pods:
        doc = pod.to_dict()
        assert doc["spec"]["resourceClaims"] == [
            {
                "name": "compute-domain-channel",
                "resourceClaimTemplateName": "training-job-imex-channel",
            }
        ]
        assert doc["spec"]["containers"][0]["resources"]["claims"] == [
            {"name": "compute-domain-channel"}
        ]


def test_pod_options_reach_every_pod() -> None:
    job = _job((A, 1), image="img:1", command=("sh", "-c", "x"), gpus=2, priority_class="hi")
    (pod,) = plan.plan(job).pods
    doc = pod.to_dict()
    assert doc["spec"]["priorityClassName"] == "hi"
    (ctr,) = doc["spec"]["containers"]
    assert (ctr["image"], ctr["command"]) == ("img:1", ["sh", "-c", "x"])
    assert ctr["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    bare = plan.plan(_job((A, 1), gpus=0)).pods[0].to_dict()
    assert "priorityClassName" not in bare["spec"]
    assert "command" not in bare["spec"]["containers"][0]
    assert "limits" not in bare["spec"]["containers"][0]["resources"]


@pytest.mark.parametrize("rank", [0, 3, 4, 6])
def test_a_replacement_is_the_ranks_pod_in_the_same_domain_under_a_new_name(rank: int) -> None:
    job = _job((A, 4), (B, 3))
    first = plan.rank_pod(job, rank).to_dict()
    again = plan.rank_pod(job, rank, 2).to_dict()
    assert again["metadata"]["name"] == f"training-job-{rank}-r2"
    assert again["metadata"]["labels"][plan.GENERATION_LABEL] == "2"
    assert again["spec"]["affinity"] == _guide_affinity(A if rank < 4 else B)
    again["metadata"]["name"] = first["metadata"]["name"]
    again["metadata"]["labels"][plan.GENERATION_LABEL] = "0"
    assert again == first


@pytest.mark.parametrize("rank", [-1, 7, 100])
def test_a_rank_the_job_does_not_have_is_refused(rank: int) -> None:
    with pytest.raises(specs.JobSpecError, match=f"ranks 0..6, not {rank}"):
        plan.rank_pod(_job((A, 4), (B, 3)), rank)


def test_an_invalid_job_is_refused_before_any_object_is_built() -> None:
    with pytest.raises(specs.JobSpecError, match="node count 0 is below 1"):
        plan.plan(_job((A, 2), (B, 0)))
