"""A port chosen for a control-plane component but bound by someone else first.

``componentstart.free_port`` finds a port nobody holds at that moment; another process can bind
it before kube-apiserver does (seen once in six CI runs: the API server exited with "address
already in use" and the test's set-up failed). Here the port handed to the API server is held
by a listening socket of the test: the real kube-apiserver exits on it, and the control plane
must start again on ports chosen afresh, say so once, and come up healthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from pathlib import Path

import pytest

from compute_domains.sim import componentstart, controlplane, toolchain


async def test_a_port_taken_before_the_api_server_binds_it_is_chosen_again(
    toolset: toolchain.Toolset,
    sim_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken: int = holder.getsockname()[1]
        chosen: list[int] = []
        real = componentstart.free_port

        def first_one_taken() -> int:
            # The first port chosen is the API server's (the settings name none).
            port = taken if not chosen else real()
            chosen.append(port)
            return port

        monkeypatch.setattr(componentstart, "free_port", first_one_taken)
        cp = controlplane.ControlPlane(
            controlplane.ControlPlaneSettings(
                state_dir=sim_home / "port-taken", bin_dir=toolset.bin_dir
            )
        )
        caplog.set_level(logging.WARNING, logger=controlplane.__name__)
        task = asyncio.create_task(cp.run())
        ready = asyncio.create_task(cp.ready.wait())
        try:
            done, _ = await asyncio.wait({task, ready}, timeout=240, return_when="FIRST_COMPLETED")
            if task in done:
                task.result()  # the start's own error, if it gave up
            assert ready in done, "the control plane did not turn healthy within 240 s"
            assert cp.endpoints is not None
            assert not cp.endpoints.api_server.endswith(f":{taken}"), cp.endpoints.api_server
            warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert warnings == [
                "kube-apiserver could not bind its port (address in use); "
                "starting the control plane again on other ports"
            ], warnings
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 60)
