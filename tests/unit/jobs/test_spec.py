"""The job spec: names the guide gives, validation that names every problem, the record."""

from __future__ import annotations

import re
from typing import Any

import pytest

from compute_domains.jobs import spec as specs

A = "804c7837-0000-4000-8000-00000000000a"
B = "89164aa7-0000-4000-8000-00000000000b"


def _job(**kw: Any) -> specs.JobSpec:
    base: dict[str, Any] = {
        "name": "training-job",
        "domains": (
            specs.Domain(cluster_uuid=A, node_count=18),
            specs.Domain(cluster_uuid=B, node_count=18),
        ),
    }
    return specs.JobSpec(**(base | kw))


def test_names_are_the_guides_for_a_job_called_training_job() -> None:
    job = _job()
    assert (job.cd_name, job.channel_template, job.rdma_template, job.world_size) == (
        "training-job-cd",
        "training-job-imex-channel",
        "training-job-rdma",
        36,
    )


@pytest.mark.parametrize(
    ("rank", "uuid"),
    [(0, A), (17, A), (18, B), (35, B)],
    ids=["first", "last-of-a", "first-of-b", "last"],
)
def test_a_ranks_domain_follows_the_domain_order(rank: int, uuid: str) -> None:
    assert specs.domain_of(_job(), rank).cluster_uuid == uuid


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"name": "Training_Job"}, "must be a DNS label", id="name-not-dns"),
        pytest.param({"name": "x" * 41}, "at most 40 characters", id="name-too-long"),
        pytest.param({"namespace": "Team A"}, "namespace 'Team A' is not a DNS label", id="ns"),
        pytest.param({"domains": ()}, "no domain allocated", id="no-domain"),
        pytest.param(
            {"domains": (specs.Domain(cluster_uuid=A, node_count=0),)},
            "node count 0 is below 1",
            id="zero-nodes",
        ),
        pytest.param(
            {"domains": (specs.Domain(cluster_uuid="not a uuid!", node_count=1),)},
            "is not a valid label value",
            id="bad-uuid",
        ),
        pytest.param(
            {
                "domains": (
                    specs.Domain(cluster_uuid=A, node_count=1),
                    specs.Domain(cluster_uuid=A, node_count=2),
                )
            },
            f"cluster UUID {A} is allocated twice",
            id="same-domain-twice",
        ),
        pytest.param({"image": ""}, "no image", id="no-image"),
        pytest.param({"gpus": -1}, "GPUs per pod -1 is negative", id="gpus"),
        pytest.param({"rdma_nics": 0}, "RDMA NICs per pod 0 is below 1", id="nics"),
        pytest.param({"priority_class": "Hi There"}, "priority class", id="priority"),
    ],
)
def test_an_invalid_job_is_refused_naming_the_problem(change: dict[str, Any], message: str) -> None:
    assert any(message in p for p in specs.validate(_job(**change))), specs.validate(_job(**change))
    with pytest.raises(specs.JobSpecError, match=re.escape(message)):
        specs.checked(_job(**change))


def test_every_problem_is_named_at_once() -> None:
    problems = specs.validate(_job(name="BAD", gpus=-1, image=""))
    assert len(problems) == 3, problems


def test_without_rdma_the_nic_count_does_not_matter() -> None:
    assert specs.validate(_job(rdma=False, rdma_nics=0)) == []


def test_a_valid_job_passes() -> None:
    assert specs.validate(_job()) == []
    assert specs.checked(_job()) == _job()


@pytest.mark.parametrize(
    "job",
    [
        pytest.param(_job(), id="defaults"),
        pytest.param(
            _job(command=("mnnvl-workload", "--wait", "5"), rdma=False, gpus=2, namespace="t"),
            id="options",
        ),
    ],
)
def test_the_record_round_trips(job: specs.JobSpec) -> None:
    assert specs.from_record(specs.to_record(job)) == job


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("{", id="not-json"),
        pytest.param('{"version": 2}', id="other-version"),
        pytest.param(
            specs.to_record(_job()).replace('"nodeCount":18', '"nodeCount":0'), id="invalid-job"
        ),
        pytest.param(specs.to_record(_job()).replace('"gpus"', '"gpuz"'), id="unknown-field"),
    ],
)
def test_an_unreadable_record_is_an_error(text: str) -> None:
    with pytest.raises(specs.JobSpecError):
        specs.from_record(text)
