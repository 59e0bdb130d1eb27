"""The sim supervisor: one long-lived process that owns everything a simulated cluster runs.

``cdctl sim up`` starts it detached (``cdctl sim serve``); it runs the control plane and records
its phase in ``state.json`` (``starting`` → ``ready``, or ``failed`` with the reason). SIGTERM or
SIGINT stops everything in order. Every child it starts dies with it (see ``sim.procs``), so a
killed supervisor leaves no process behind, only its folder, which the next ``up`` recognises
as stale and removes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import time
from pathlib import Path

from compute_domains.infra import errors
from compute_domains.sim import controlplane, state

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SimSettings:
    """Everything one simulated cluster needs to start."""

    home: Path
    """Sim home (``$CD_SIM_HOME``); this sim lives in ``<home>/sims/<name>``."""
    name: str
    """Name of the sim; several sims run side by side under distinct names."""
    bin_dir: Path
    """Folder with the built upstream tools."""
    api_port: int | None = None
    """Fixed API server port, or None for a free one."""


class SimCluster:
    """Runs one sim until cancelled; writes its phase to ``state.json`` as it goes."""

    def __init__(self, settings: SimSettings) -> None:
        self._s = settings
        self.paths = state.SimPaths(settings.home, settings.name)

    def _record(self, phase: state.Phase, error: str = "") -> None:
        state.write_state(
            self.paths,
            state.SimState(
                name=self._s.name,
                phase=phase,
                supervisor_pid=os.getpid(),
                bin_dir=str(self._s.bin_dir),
                created=self._created,
                error=error,
            ),
        )

    async def run(self) -> None:
        """Start the control plane, mark the sim ready, serve until cancelled."""
        self._created = time.time()
        self._record("starting")
        cp = controlplane.ControlPlane(
            controlplane.ControlPlaneSettings(
                state_dir=self.paths.control_plane,
                bin_dir=self._s.bin_dir,
                api_port=self._s.api_port,
            )
        )
        task = asyncio.create_task(cp.run(), name="control-plane")
        ready = asyncio.create_task(cp.ready.wait(), name="control-plane-ready")
        try:
            done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                task.result()  # raises the start-up failure
                raise errors.SimError("control plane stopped before it was ready")
            self._record("ready")
            await task
        except asyncio.CancelledError:
            self._record("stopping")
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise
        except errors.ComputeDomainsError as err:
            self._record("failed", str(err))
            raise
        finally:
            ready.cancel()


async def serve(settings: SimSettings) -> int:
    """Entry point of the supervisor process: run until SIGTERM/SIGINT; exit code for the CLI."""
    cluster = SimCluster(settings)
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main.cancel)
    try:
        await cluster.run()
    except asyncio.CancelledError:
        logger.info("sim %s stopped", settings.name)
        return 0
    except errors.ComputeDomainsError as err:
        logger.error("sim %s failed: %s", settings.name, err)
        return 1
    return 0
