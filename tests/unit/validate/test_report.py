import json

import pytest

from compute_domains.validate import report
from compute_domains.validate.report import Check, Status


def _checks(*statuses: Status) -> tuple[Check, ...]:
    return tuple(Check(name=f"c{i}", status=s, detail="d") for i, s in enumerate(statuses))


@pytest.mark.parametrize(
    ("statuses", "verdict", "code"),
    [
        ((), Status.SKIP, 0),
        ((Status.INFO,), Status.SKIP, 0),
        ((Status.SKIP, Status.INFO), Status.SKIP, 0),
        ((Status.PASS, Status.INFO, Status.SKIP), Status.PASS, 0),
        ((Status.PASS, Status.WARN), Status.WARN, 0),
        ((Status.PASS, Status.WARN, Status.FAIL), Status.FAIL, 1),
        ((Status.FAIL,), Status.FAIL, 1),
    ],
)
def test_verdict_and_exit_code(statuses: tuple[Status, ...], verdict: Status, code: int) -> None:
    rep = report.Report(command="x", checks=_checks(*statuses))
    assert rep.verdict is verdict
    assert rep.exit_code == code


def test_text_ends_with_verdict_line_naming_bad_checks() -> None:
    rep = report.Report(
        command="node",
        facts=(("driver version", "580"), ("GPUs", "2")),
        tables=(report.Table(title="GPUs", columns=("idx", "name"), rows=(("0", "H200"),)),),
        checks=_checks(Status.PASS, Status.FAIL, Status.WARN),
    )
    lines = report.render_text(rep).splitlines()
    assert lines[0] == "== cdctl validate node =="
    assert lines[1] == "driver version  580"
    assert "  idx  name" in lines
    assert "  [FAIL] c1: d" in lines
    assert lines[-1] == "verdict: FAIL (1 pass, 1 fail, 1 warn); see: c1, c2"


def test_table_columns_are_aligned() -> None:
    table = report.Table(title="t", columns=("a", "bb"), rows=(("long", "x"), ("s", "yy")))
    assert report.render_table(table) == ["t:", "  a     bb", "  long  x", "  s     yy"]


def test_json_document() -> None:
    rep = report.Report(
        command="nccl", facts=(("k", "v"),), checks=_checks(Status.PASS), data={"n": 2}
    )
    doc = json.loads(report.render(rep, "json"))
    assert doc == {
        "command": "nccl",
        "facts": {"k": "v"},
        "data": {"n": 2},
        "checks": [{"name": "c0", "status": "pass", "detail": "d"}],
        "verdict": "pass",
    }
    assert report.render(rep, "text").startswith("== cdctl validate nccl ==")
