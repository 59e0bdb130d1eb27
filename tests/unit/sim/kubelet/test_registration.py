"""Plugin registration retries after the kubelet's back-off, not at every reconcile pass."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from compute_domains.sim.kubelet import registration


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _socket(root: Path, name: str) -> socket.socket:
    folder = root / registration.REGISTRY_DIR
    folder.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(folder / name))
    return sock


def test_a_failed_registration_waits_for_the_back_off_and_a_new_socket_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _Clock()
    reg = registration.PluginRegistry(
        tmp_path, logging.LoggerAdapter(logging.getLogger("t")), clock=clock
    )
    attempts: list[float] = []

    async def refuse(sock: Path) -> bool:
        attempts.append(clock.now)
        return False

    monkeypatch.setattr(reg, "_register", refuse)
    first = _socket(tmp_path, "d-reg.sock")

    async def passes(seconds: int) -> None:
        for _ in range(seconds):  # one pass a second, as the DRA manager calls it
            await reg.reconcile()
            clock.now += 1.0

    asyncio.run(passes(17))
    # 0.5 s, 1 s, 2 s, 4 s, 8 s after each failure (passes 1 s apart: the first rounds up).
    assert [a - 100.0 for a in attempts] == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0]
    assert registration.RETRY.base_delay(20) == 122.0  # the kubelet's cap, 2 min 2 s
    first.close()
    (tmp_path / registration.REGISTRY_DIR / "d-reg.sock").unlink()
    second = _socket(tmp_path, "d-reg.sock")  # the plugin restarted: a new socket
    attempts.clear()
    asyncio.run(passes(1))
    assert attempts == [117.0]
    second.close()


def test_an_unchanged_folder_is_not_listed_again_and_a_new_socket_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg = registration.PluginRegistry(tmp_path, logging.LoggerAdapter(logging.getLogger("t")))
    registered: list[Path] = []

    async def accept(sock: Path) -> bool:
        registered.append(sock)
        reg._sockets[sock] = "d"
        return True

    monkeypatch.setattr(reg, "_register", accept)
    listings: list[object] = []
    real_scandir = os.scandir

    def counting_scandir(path: Any) -> Any:
        listings.append(path)
        return real_scandir(path)

    monkeypatch.setattr(registration.os, "scandir", counting_scandir)
    first = _socket(tmp_path, "a-reg.sock")
    folder = tmp_path / registration.REGISTRY_DIR
    old = time.time() - 10
    os.utime(folder, (old, old))

    async def passes(n: int) -> None:
        for _ in range(n):
            await reg.reconcile()

    asyncio.run(passes(3))
    assert registered == [folder / "a-reg.sock"]
    assert len(listings) == 1  # the folder did not change after the first pass
    second = _socket(tmp_path, "b-reg.sock")  # a change just now: listed, not trusted yet
    asyncio.run(passes(2))
    assert registered == [folder / "a-reg.sock", folder / "b-reg.sock"]
    assert len(listings) == 3
    first.close()
    second.close()
