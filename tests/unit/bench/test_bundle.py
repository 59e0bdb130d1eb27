"""The bench bundle: parts within their size, unpackable alone in any order, checked whole."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from compute_domains.bench import bundle, bundle_run
from compute_domains.cli import benchbundle

_PART = 1 << 20  # 1 MiB parts keep the test small


def test_plan_keeps_every_part_within_its_size_and_cuts_only_what_cannot_fit() -> None:
    sizes = {"big": 3 * _PART, "a": 300_000, "b": 200_000, "c": 10}
    plan = bundle.plan_parts(sizes, _PART)
    for pieces in plan:
        used = sum(length + 3 * 512 for _, _, length in pieces)
        assert used <= _PART - 256 * 1024
    covered: dict[str, int] = {}
    for pieces in plan:
        for name, offset, length in pieces:
            assert offset == covered.get(name, 0), "pieces of a file come in order"
            covered[name] = offset + length
    assert covered == sizes
    whole = [name for pieces in plan for name, _, length in pieces if length == sizes[name]]
    assert sorted(whole) == ["a", "b", "c"]


def test_a_part_size_without_room_is_refused() -> None:
    with pytest.raises(bundle.BundleError, match="too small"):
        bundle.plan_parts({"a": 1}, 1000)


@pytest.mark.parametrize(
    ("text", "size"),
    [("60MiB", 60 << 20), ("500KiB", 500 << 10), ("1000", 1000), ("2mb", 2 * 10**6)],
)
def test_sizes_parse(text: str, size: int) -> None:
    assert benchbundle.parse_size(text) == size


def _staging(tmp_path: Path) -> Path:
    staging = tmp_path / "staging"
    (staging / "tools" / "etcd" / "bin").mkdir(parents=True)
    rng = random.Random(7)
    (staging / "tools" / "etcd" / "bin" / "etcd.xz").write_bytes(rng.randbytes(int(2.5 * _PART)))
    # a tool's own manifest has the bundle manifest's file name, one folder down: it travels
    (staging / "tools" / "etcd" / "manifest.json").write_text('{"etcd": "abc"}')
    (staging / "requirements.txt").write_text("click\n")
    (staging / "wheels").mkdir()
    (staging / "wheels" / "x-1-py3-none-any.whl").write_bytes(rng.randbytes(400_000))
    (staging / bundle.RUN_SCRIPT).write_bytes(Path(bundle_run.__file__).read_bytes())
    return staging


def _unpack(parts: list[Path], dest: Path) -> None:
    dest.mkdir(exist_ok=True)
    for part in parts:
        with tarfile.open(part) as tar:
            tar.extractall(dest, filter="tar")


def test_parts_unpack_in_any_order_and_the_runner_joins_and_checks_them(tmp_path: Path) -> None:
    staging = _staging(tmp_path)
    expected = {
        p.relative_to(staging).as_posix(): p.read_bytes()
        for p in staging.rglob("*")
        if p.is_file() and p.relative_to(staging).as_posix() != bundle.RUN_SCRIPT
    }
    parts = bundle.write_parts(staging, tmp_path / "out", _PART, {"bundle_id": "t", "commit": "c"})
    assert len(parts) >= 3
    assert all(p.stat().st_size <= _PART for p in parts)
    for part in parts:  # every part says what the whole bundle is
        with tarfile.open(part) as tar:
            assert {bundle.MANIFEST, bundle.RUN_SCRIPT} <= set(tar.getnames())
    dest = tmp_path / "unpacked"
    _unpack(list(reversed(parts)), dest)
    manifest = bundle_run.check(dest)
    assert manifest["parts"] == len(parts)
    for rel, data in expected.items():
        assert (dest / rel).read_bytes() == data, rel
    assert not list(dest.rglob("*.chunk*")), "joined chunks are removed"


def test_a_missing_part_is_named_before_anything_is_installed(tmp_path: Path) -> None:
    staging = _staging(tmp_path)
    parts = bundle.write_parts(staging, tmp_path / "out", _PART, {"bundle_id": "t", "commit": "c"})
    dest = tmp_path / "unpacked"
    _unpack(parts[1:], dest)
    done = subprocess.run(
        [
            sys.executable,
            str(dest / bundle.RUN_SCRIPT),
            "--scratch",
            str(tmp_path / "s"),
            "--results",
            str(tmp_path / "r"),
            "--check-only",
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode != 0
    assert "bundle incomplete" in done.stderr
    assert f"has {len(parts)} parts" in done.stderr
    assert not (tmp_path / "s").exists()


def test_a_corrupt_file_is_refused(tmp_path: Path) -> None:
    staging = _staging(tmp_path)
    parts = bundle.write_parts(staging, tmp_path / "out", _PART, {"bundle_id": "t", "commit": "c"})
    dest = tmp_path / "unpacked"
    _unpack(parts, dest)
    wheel = dest / "wheels" / "x-1-py3-none-any.whl"
    wheel.write_bytes(b"x" + wheel.read_bytes()[1:])
    with pytest.raises(SystemExit, match="checksum mismatch"):
        bundle_run.check(dest)
    assert json.loads((dest / bundle.MANIFEST).read_text())["bundle_id"] == "t"
