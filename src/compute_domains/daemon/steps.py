"""The daemon's critical path, step by step: how long after its process started each step was done.

A daemon is on the formation's critical path from its container's start to its first Ready
report. :class:`Steps` records, once each and in this order:

``settings_loaded``
    interpreter up, imports done, flags and environment read and validated;
``pod_labelled``
    our pod labelled with its clique ID (the first API write);
``registered``
    our entry is in the clique (an index of our own);
``imex_started``
    ``nvidia-imex`` spawned (after the first peer mapping was written);
``imex_ready``
    our own IMEX check saw ``READY`` the first time;
``pod_ready``
    our pod's Ready condition came back by watch (the kubelet's probe passed) while our own check
    passes: we start writing ``Ready`` into our entry;
``ready_reported``
    our clique entry says ``Ready`` (the word the plugin and the controller wait for).

Each step is one INFO log line with the structured fields ``step``, ``since_start_s`` (seconds
since the process started) and ``since_prev_s`` (since the previous step done), and a call of
``on_step`` (the metrics gauge). "Process start" is the kernel's start time of this process
(``/proc/self/stat``, field 22), so the interpreter's start and the imports count too; in a
container the process is the container's first one (on the simulator that includes the
container set-up before its ``exec``). Times are on ``CLOCK_BOOTTIME``, the clock that start time
is counted on. A step that never happens (no clique ID: nothing after ``pod_labelled``) is simply
not logged. The ``bench`` package parses these lines from the daemon pods' logs.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

logger = logging.getLogger(__name__)

SETTINGS_LOADED: Final = "settings_loaded"
POD_LABELLED: Final = "pod_labelled"
REGISTERED: Final = "registered"
IMEX_STARTED: Final = "imex_started"
IMEX_READY: Final = "imex_ready"
POD_READY: Final = "pod_ready"
READY_REPORTED: Final = "ready_reported"
ORDER: Final = (
    SETTINGS_LOADED,
    POD_LABELLED,
    REGISTERED,
    IMEX_STARTED,
    IMEX_READY,
    POD_READY,
    READY_REPORTED,
)
"""The steps in the order a forming daemon does them."""

Clock = Callable[[], float]


def boottime() -> float:
    """Seconds since boot on the clock ``/proc/<pid>/stat`` start times are counted on."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def start_from_stat(stat: str, ticks_per_second: int) -> float:
    """A process's start (seconds since boot) from the text of its ``/proc/<pid>/stat``.

    Raises:
        ValueError: the text is not a ``stat`` line.
    """
    # The command name (field 2) is in parentheses and may hold spaces or ")": cut at the last.
    fields = stat.rsplit(")", 1)[1].split()
    if len(fields) < 20:
        raise ValueError(f"not a /proc/<pid>/stat line: {stat[:80]!r}")
    return int(fields[19]) / ticks_per_second  # field 22 overall: starttime in clock ticks


def process_start(stat_path: Path = Path("/proc/self/stat")) -> float | None:
    """This process's start (seconds since boot), or None where /proc cannot tell it."""
    try:
        return start_from_stat(stat_path.read_text(), os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):
        return None


class Steps:
    """Records each step once (see the module docstring).

    Args:
        started_at: the process start on ``clock`` (None: the first step's time, so every
            step counts from the moment the daemon could first tell).
        clock: seconds on the same clock as ``started_at``.
        on_step: called with each step's name and its seconds since the process start.
        fields: extra fields bound to every step line (``cd``, ``node``).
    """

    def __init__(
        self,
        *,
        started_at: float | None,
        clock: Clock = boottime,
        on_step: Callable[[str, float], None] | None = None,
        fields: dict[str, str] | None = None,
    ) -> None:
        self._start = started_at
        self._clock = clock
        self._on_step = on_step
        self._fields = dict(fields or {})
        self._done: dict[str, float] = {}
        self._prev = 0.0

    @property
    def done(self) -> dict[str, float]:
        """Step → seconds since the process start, for the steps done so far."""
        return dict(self._done)

    def mark(self, step: str) -> None:
        """Step ``step`` is done now; only its first time counts."""
        if step in self._done:
            return
        now = self._clock()
        if self._start is None:
            self._start = now
        since_start = max(0.0, now - self._start)
        since_prev = max(0.0, since_start - self._prev)
        self._done[step] = since_start
        self._prev = since_start
        logger.info(
            "startup step %s: %.3fs after process start (+%.3fs)",
            step,
            since_start,
            since_prev,
            extra={
                **self._fields,
                "step": step,
                "since_start_s": round(since_start, 3),
                "since_prev_s": round(since_prev, 3),
            },
        )
        if self._on_step is not None:
            self._on_step(step, since_start)
