"""Atomic file replacement, durable by default, without fsyncs when asked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compute_domains.infra import atomicfile


def _count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_durable_write_syncs_the_file_and_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_fsyncs(monkeypatch)
    atomicfile.write_atomic(tmp_path / "a/b.txt", "one", mode=0o600)
    assert (tmp_path / "a/b.txt").read_text() == "one"
    assert (tmp_path / "a/b.txt").stat().st_mode & 0o777 == 0o600
    assert len(calls) == 2


def test_a_non_durable_write_replaces_atomically_without_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    atomicfile.write_atomic(target, "old")
    calls = _count_fsyncs(monkeypatch)
    atomicfile.write_atomic(target, b"new", mode=0o755, durable=False)
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o755
    assert calls == []
    assert [p.name for p in tmp_path.iterdir()] == ["f"]  # no temporary file left behind
