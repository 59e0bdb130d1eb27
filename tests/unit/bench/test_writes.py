"""The writes-per-kind block of docs/benchmarks.md, rendered from two result files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compute_domains.bench import writes


def _doc(**runs: dict[str, dict[str, int]]) -> dict[str, Any]:
    """A result document with one N=2 run per driver: ``driver={"formation": {...}, ...}``."""
    return {
        "results": [
            {
                "driver": driver,
                "n": 2,
                "runs": [
                    {
                        "requests_formation": r.get("formation", {}),
                        "requests_teardown": r.get("teardown", {}),
                    }
                ],
            }
            for driver, r in runs.items()
        ]
    }


def test_writes_leave_out_reads_and_leases() -> None:
    got = writes.writes(
        {"PUT resourceslices": 2, "LIST pods": 5, "PATCH leases": 9, "POST events": 3}
    )
    assert got == {"PUT resourceslices": 2, "POST events": 3}


def test_table_per_node_with_who_and_why_and_nvidia_from_before() -> None:
    before = _doc(
        ours={"formation": {"PUT resourceslices": 2, "PATCH events": 8}},
        nvidia={"formation": {"PUT nodes": 2, "PATCH events": 2}},
    )
    after = _doc(ours={"formation": {"PUT resourceslices": 2, "PATCH events": 2}})
    rows = writes.table(before, after, 2, "requests_formation")
    assert rows[0].startswith("| write | ours before | ours after | NVIDIA | who writes it |")
    by_kind = {r.split(" | ")[0][2:]: r for r in rows[2:]}
    assert by_kind["PATCH events"].startswith("| PATCH events | 4.0 | 1.0 | 1.0 |")
    assert by_kind["PUT nodes"].startswith("| PUT nodes | 0.0 | 0.0 | 1.0 | NVIDIA's")
    assert "holds it" in by_kind["PUT resourceslices"]
    assert (
        rows[-1] == "| **all, per node (total)** | **5.0** (10) | **2.0** (4) | **2.0** (4) | | |"
    )


def test_update_doc_renders_the_files_its_marker_names(tmp_path: Path) -> None:
    before = _doc(ours={"formation": {"POST events": 4}}, nvidia={"formation": {"POST events": 2}})
    after = _doc(ours={"formation": {"POST events": 2}, "teardown": {"PUT resourceslices": 2}})
    (tmp_path / "b.json").write_text(json.dumps(before))
    (tmp_path / "a.json").write_text(json.dumps(after))
    marker = "<!-- bench:writes before=b.json after=a.json -->"
    text = f"intro\n{marker}\nold\n<!-- /bench:writes -->\nend\n"
    out = writes.update_doc(text, tmp_path)
    assert out.startswith(
        "intro\n<!-- bench:writes before=b.json after=a.json -->\n**N = 2, formation**"
    )
    assert "| POST events | 2.0 | 1.0 | 1.0 |" in out
    assert "**N = 2, teardown**" in out
    assert (
        "| PUT resourceslices | 1.0 | our kubelet plugin | 1 per node: the node's channel "
        "slots drop the CD's binding" in out
    ), "teardown's own reason"
    assert "\nold\n" not in out and out.endswith("<!-- /bench:writes -->\nend\n")
    assert writes.update_doc("no marker\n", tmp_path) == "no marker\n"
    empty = f"{marker}\n<!-- /bench:writes -->\n"
    assert writes.update_doc(empty, tmp_path) == writes.update_doc(out, tmp_path)[6:-4]
