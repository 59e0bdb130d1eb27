"""``cdctl job``: domains given as ``UUID:NODES``; bad input refused before any API call."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from compute_domains.cli import job
from compute_domains.jobs import spec as specs


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param("804c7837-aaaa:18", ("804c7837-aaaa", 18), id="uuid-count"),
        pytest.param("a:b:2", ("a:b", 2), id="last-colon-splits"),
        pytest.param("x:0", ("x", 0), id="zero-left-to-validation"),
    ],
)
def test_a_domain_is_uuid_colon_node_count(value: str, want: tuple[str, int]) -> None:
    assert job.parse_domain(value) == specs.Domain(cluster_uuid=want[0], node_count=want[1])


@pytest.mark.parametrize("value", ["804c7837", ":3", "x:", "x:two", "x:-1"])
def test_a_malformed_domain_is_refused(value: str) -> None:
    with pytest.raises(click.BadParameter, match="is not <clusterUUID>:<node count>"):
        job.parse_domain(value)


def test_launch_refuses_a_bad_job_before_talking_to_any_cluster(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        job.group,
        ["launch", "Bad_Name", "--domain", "u:0", "--kubeconfig", str(tmp_path / "none")],
    )
    assert isinstance(result.exception, specs.JobSpecError), result.output
    assert "must be a DNS label" in str(result.exception)
    assert "node count 0 is below 1" in str(result.exception)


def test_launch_needs_a_domain() -> None:
    result = CliRunner().invoke(job.group, ["launch", "train"])
    assert result.exit_code == 2
    assert "Missing option '--domain'" in result.output
