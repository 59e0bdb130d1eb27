"""A simulated kubelet writes volume files as the kubelet's AtomicWriter does: atomically, never
fsynced. The writes run on the node host's event loop, shared by every kubelet of the process,
so an fsync there stalls them all behind the disk (seen at N = 36)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compute_domains.sim.kubelet import volumes


def test_volume_files_are_written_whole_and_never_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    target = tmp_path / "volumes/kubernetes.io~projected/kube-api-access"
    volumes._write_files(target, {"token": b"t0k3n", "ca.crt": b"CA", "namespace": b"ns"}, 0o644)
    assert synced == [], "a volume file was fsynced on the kubelet's loop"
    assert (target / "token").read_bytes() == b"t0k3n"
    assert (target / "namespace").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in target.iterdir()) == ["ca.crt", "namespace", "token"]
