"""The benchmark pictures as PNG files (``bench.draw``, ``bench.pictures``, ``bench pictures``)."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from compute_domains.bench import draw, figures, pictures
from compute_domains.cli import benchpictures
from tests.unit.bench.test_figures import DOC, RUNNING

pytestmark = pytest.mark.slow_unit(
    8, "draws PNGs with matplotlib: about 0.5 s a picture, and 1 s for its first import"
)

_PNG = b"\x89PNG\r\n\x1a\n"


def _size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature."""
    data = path.read_bytes()
    assert data[:8] == _PNG, f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _result(tmp_path: Path, name: str = "sidebyside-20261206-000000.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(DOC))
    return path


def test_a_result_file_gets_its_two_pngs_beside_it(tmp_path: Path) -> None:
    drawn = pictures.for_file(_result(tmp_path))
    assert [p.name for p in drawn] == [
        "sidebyside-20261206-000000.curve.png",
        "sidebyside-20261206-000000.phases.png",
    ]
    for path in drawn:
        width, height = _size(path)
        assert width == 900 and 400 <= height <= 2000, (path.name, width, height)
        assert 10_000 < path.stat().st_size < 400_000


def test_the_same_input_draws_the_same_bytes(tmp_path: Path) -> None:
    first = [p.read_bytes() for p in pictures.for_file(_result(tmp_path))]
    second = [p.read_bytes() for p in pictures.for_file(_result(tmp_path))]
    assert first == second
    assert b"Software" not in first[0] and b"matplotlib" not in first[0]


def test_the_drawn_curve_is_the_sorted_running_times() -> None:
    fig = draw.curve_figure("t", pictures.file_panels(DOC))
    panel = fig.axes[0]  # N = 4
    drawn = [(tuple(line.get_xdata()), tuple(line.get_ydata())) for line in panel.lines]
    assert ((0.0, *sorted(RUNNING)), (0, 1, 2, 3, 4)) in drawn
    # Three runs of ours with three series each, and nvidia's older run as three points.
    assert len(panel.lines) == 3 * 3 + 3
    assert ((4.0,), (4,)) in drawn


def test_the_drawn_bars_are_the_phase_medians() -> None:
    fig = draw.phases_figure("t", pictures.file_panels(DOC))
    widths = sorted(round(p.get_width(), 6) for p in fig.axes[0].patches)
    expected = sorted(round(b.median, 6) for b in figures.bars(figures.sources(DOC, 4)))
    assert widths == expected


def test_a_figures_block_draws_the_named_files_and_shows_them(tmp_path: Path) -> None:
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    for name in ("a-formation-1.json", "b-formation-2.json"):
        _result(results, name)
    docs = tmp_path / "docs"
    text = (
        "intro\n"
        "<!-- bench:figures name=set-n4 n=4 files=a-formation-1.json,b-formation-2.json"
        ' title="At 4" -->\n'
        "old text\n"
        "<!-- /bench:figures -->\n"
        "outro\n"
    )
    updated, drawn = pictures.update_doc(text, results, docs)
    assert [p.name for p in drawn] == [
        "set-n4.curve.png",
        "set-n4.phases.png",
        "a-formation-1.curve.png",
        "a-formation-1.phases.png",
        "b-formation-2.curve.png",
        "b-formation-2.phases.png",
    ]
    assert all(p.exists() for p in drawn)
    assert "old text" not in updated and updated.startswith("intro\n") and "outro" in updated
    assert "![formation curve: set-n4.curve.png](../bench/results/set-n4.curve.png)" in updated
    assert "![phases: set-n4.phases.png](../bench/results/set-n4.phases.png)" in updated
    assert updated == pictures.update_doc(updated, results, docs)[0]  # idempotent
    # Both files' runs are in the one panel, the second file's labels told apart by its name.
    found = pictures.gather(results, 4, ["a-formation-1.json", "b-formation-2.json"])
    assert [label for label, _ in found] == [
        "ours (resident, per domain)",
        "nvidia",
        "ours (resident, per domain), b-formation-2.json",
        "nvidia, b-formation-2.json",
    ]


def test_a_figures_block_naming_a_missing_size_is_refused(tmp_path: Path) -> None:
    _result(tmp_path, "a-formation-1.json")
    text = "<!-- bench:figures name=x n=1152 files=a-formation-1.json -->\n<!-- /bench:figures -->"
    with pytest.raises(ValueError, match="no results for N = 1152"):
        pictures.update_doc(text, tmp_path, tmp_path)


def test_a_file_without_results_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "failed.json"
    path.write_text(json.dumps({"results": [], "failures": ["N=2304: timeout"]}))
    with pytest.raises(ValueError, match="no formation results"):
        pictures.for_file(path)


def test_the_command_draws_each_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(benchpictures.pictures_cmd, [str(_result(tmp_path))])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "sidebyside-20261206-000000.curve.png").exists()
    assert "picture written to" in result.output


def test_a_new_run_gets_its_pictures_and_a_bad_file_only_a_line(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, width=200)
    benchpictures.after_run(console, _result(tmp_path))
    assert (tmp_path / "sidebyside-20261206-000000.phases.png").exists()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"results": [{"driver": "ours"}]}))  # no N
    benchpictures.after_run(console, bad)
    assert "no pictures drawn for" in out.getvalue() and "KeyError" in out.getvalue()
