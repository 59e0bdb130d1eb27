"""Churn's consistency checks and statistics (pure logic; the soak itself runs on the sim)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compute_domains.bench import churn

UID = "cd-uid"


def _formed(n: int = 2) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, str]]:
    nodes = [{"name": f"n{i}", "cliqueID": "c.1", "index": i, "status": "Ready"} for i in range(n)]
    cd = {"status": {"status": "Ready", "nodes": nodes}}
    cliques = [
        {
            "metadata": {"name": f"{UID}.c.1"},
            "daemons": [
                {"nodeName": f"n{i}", "cliqueID": "c.1", "index": i, "status": "Ready"}
                for i in range(n)
            ],
        }
    ]
    labels = {f"n{i}": UID for i in range(n)} | {"other": ""}
    return cd, cliques, labels


def test_a_consistent_domain_has_no_problems() -> None:
    assert churn._formed_problems(*_formed(), n=2, uid=UID) == []


def test_duplicate_index_missing_label_and_disagreeing_clique_are_reported() -> None:
    cd, cliques, labels = _formed(3)
    cd["status"]["nodes"][2]["index"] = 1
    labels["n0"] = "someone-else"
    cliques[0]["daemons"].pop()
    problems = churn._formed_problems(cd, cliques, labels, n=3, uid=UID)
    assert any("duplicate (cliqueID, index)" in p for p in problems)
    assert any("node n0 lacks the CD label" in p for p in problems)
    assert any("disagree" in p for p in problems)


def test_wrong_count_not_ready_and_out_of_range_index() -> None:
    cd, cliques, labels = _formed(2)
    cd["status"]["nodes"][1].update(status="NotReady", index=18)
    problems = churn._formed_problems(cd, cliques, labels, n=3, uid=UID)
    assert any("want 3" in p for p in problems)
    assert any("NotReady" in p for p in problems)
    assert any("outside [0, 18)" in p for p in problems)


def test_files_left_on_a_node_are_found(tmp_path: Path) -> None:
    root = tmp_path / "node-a"
    (root / "var/run/cdi").mkdir(parents=True)
    (root / "var/run/cdi/k8s.compute-domain.nvidia.com-claim_u1.json").write_text("{}")
    plugin = root / "var/lib/kubelet/plugins/compute-domain.nvidia.com"
    plugin.mkdir(parents=True)
    claims = {
        "u2": {"state": "PrepareCompleted"},
        "u3": {"state": "UnprepareCompleted"},
        "other": {"state": "PrepareCompleted"},
    }
    (plugin / "checkpoint.json").write_text(json.dumps({"claims": claims}))
    (plugin / "domains" / UID).mkdir(parents=True)
    (plugin / "domains" / "other-cd").mkdir()
    problems = churn._file_problems([root], {"u1", "u2", "u3"}, UID)
    assert sorted(problems) == [
        "CDI spec k8s.compute-domain.nvidia.com-claim_u1.json left on node-a",
        "checkpoint on node-a still holds claim u2 (PrepareCompleted)",
        f"folder domains/{UID} left on node-a",
    ]
    assert churn._file_problems([root], {"other-claim"}, "gone-cd") == []


def test_percentiles_and_summary_ignore_failed_cycles_in_timings() -> None:
    cycles = [
        churn.Cycle(lane=0, cycle=i, formation_s=float(i + 1), teardown_s=1.0, problems=[])
        for i in range(100)
    ]
    cycles.append(
        churn.Cycle(
            lane=1, cycle=0, formation_s=float("inf"), teardown_s=2.0, problems=["not formed"]
        )
    )
    summary = churn.summarize(cycles)
    assert summary["cycles"] == 101
    assert summary["failed"] == 1
    assert summary["formation_p50_s"] == 50.0
    assert summary["formation_p99_s"] == 99.0
    assert summary["problems"] == ["lane 1 cycle 0: not formed"]
    assert churn.percentile([], 0.5) == float("inf")
