"""``cdctl bench formation --workload plain`` end to end: the floor without a ComputeDomain.

One round at N = 4 in a fresh sim of its own (the command starts and stops it, the driver
installed as for every round): the same workload pods with no claim and no podAffinity reach
Running and Ready, are torn down until none is left, and the result file says so: workload
``plain``, the workload's milestones only (no daemon, clique or CD mark, and None rather than
zero for their timings), no ComputeDomain or claim written, the API requests, CPU and loads of
the run recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from compute_domains.cli import bench

pytestmark = pytest.mark.timeout(900)


def test_plain_workload_runs_end_to_end_without_a_domain(sim_home: Path, tmp_path: Path) -> None:
    args = ["formation", "--workload", "plain", "--sizes", "4", "--repeats", "1"]
    args += ["--name", "benchfloor", "--prefix", "e2e", "--results-dir", str(tmp_path)]
    result = CliRunner().invoke(bench.group, args, env={"CD_SIM_HOME": str(sim_home)})
    assert result.exit_code == 0, result.output
    # Said as soon as it formed, before the logs are read and the pods torn down.
    assert "N=4: formed: all pods Running at " in result.output, result.output
    [written] = list(tmp_path.glob("e2e-formation-*.json"))
    doc = json.loads(written.read_text())
    assert doc["workload"] == "plain" and doc["failures"] == []
    [summary] = doc["results"]
    assert summary["n"] == 4 and summary["workload"] == "plain"
    for key in ("daemons_ready_s", "cd_ready_s", "entries_ready_s", "last_daemon_to_cd_ready_s"):
        assert summary[key] is None, key
    [run] = summary["runs"]
    marks = run["milestones"]
    assert set(marks) >= {"workloads_scheduled", "workloads_running", "workloads"}
    assert {m.split("_")[0] for m in marks} == {"workloads"}, marks
    assert 0 < marks["workloads_scheduled"] <= marks["workloads"] == run["workloads_running_s"]
    assert run["teardown_s"] > 0 and run["channel_problems"] == []
    writes = {k for k, v in run["requests_formation"].items() if v and k.split()[0] == "POST"}
    assert "POST deployments" in writes, writes
    assert not {w for w in writes if "computedomain" in w or "resourceclaim" in w}, writes
    assert sum(run["cpu_s"].values()) > 0 and {"load_start", "load_end"} <= set(run)
    # kube-scheduler's own counters between the apply and formed: the 4 new pods, none re-queued.
    assert run["scheduler_moves"] == {"UnschedulablePodAdd": 4}, run["scheduler_moves"]
    assert "N=4: kube-scheduler queued pods 4 times" in result.output, result.output
