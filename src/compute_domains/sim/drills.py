"""Fault drills on a running control plane: the names a drill takes, and holding a process stopped.

``cdctl sim control-plane restart|pause COMPONENT`` reach the sim supervisor through its control
socket (``sim.control``), which calls ``ControlPlane.restart`` or ``ControlPlane.pause``. What
those share, and what is worth testing alone, lives here:

- ``component``: the component a user names, short (``apiserver``) or as the binary
  (``kube-apiserver``), or a clear error listing the choices;
- ``check_pause``: a pause length the supervisor accepts (bounded, so a typo cannot freeze a
  sim's store for hours);
- ``hold_stopped``: SIGSTOP a process, wait until the time is up or ``resume`` is set (the
  drill's client went away), and SIGCONT it in a ``finally``: a cancelled or failed drill
  never leaves the process stopped;
- ``Restarted``: what a restart reports (how long the component did not serve, old and new
  pid), as it travels over the control socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
from typing import Any, Final

from compute_domains.sim import errors

COMPONENTS: Final = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
"""The control plane's processes, by their binaries' names (``ControlPlane`` starts them)."""
SHORT_NAMES: Final = {
    "etcd": "etcd",
    "apiserver": "kube-apiserver",
    "controller-manager": "kube-controller-manager",
    "scheduler": "kube-scheduler",
}
"""What the CLI offers: the names without their ``kube-`` prefix."""
MAX_PAUSE_S: Final = 600.0
"""The longest pause a drill may ask for: longer than any client's timeout or the node grace
period, short enough that a mistyped length does not stop a sim's store for good."""


def component(name: str) -> str:
    """The component ``name`` means (``apiserver`` or ``kube-apiserver`` → ``kube-apiserver``).

    Raises:
        errors.SimError: no component of the control plane has that name.
    """
    if name in COMPONENTS:
        return name
    if name in SHORT_NAMES:
        return SHORT_NAMES[name]
    raise errors.SimError(
        f"no control-plane component {name!r}; choose one of {', '.join(SHORT_NAMES)}"
    )


def check_pause(seconds: Any) -> float:
    """``seconds`` as a pause length (more than 0, at most ``MAX_PAUSE_S``).

    Raises:
        errors.SimError: not a number, or out of that range.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise errors.SimError(f"pause length must be a number of seconds, not {seconds!r}")
    if not 0 < seconds <= MAX_PAUSE_S:
        raise errors.SimError(
            f"pause length {seconds} s is out of range: more than 0, at most {MAX_PAUSE_S:.0f} s"
        )
    return float(seconds)


async def hold_stopped(pid: int, seconds: float, resume: asyncio.Event | None = None) -> float:
    """SIGSTOP ``pid``, keep it stopped ``seconds`` (or until ``resume`` is set), SIGCONT it.

    Returns how long it was stopped. The SIGCONT is sent however the wait ends: time up,
    ``resume`` set, this coroutine cancelled. A process that ended meanwhile is not an error
    here (its owner reports that death).
    """
    loop = asyncio.get_running_loop()
    os.kill(pid, signal.SIGSTOP)
    t0 = loop.time()
    try:
        if resume is None:
            await asyncio.sleep(seconds)
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await resume.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    return loop.time() - t0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Restarted:
    """The outcome of one component restart."""

    component: str
    down_s: float
    """From the stop signal until the new process answered its health check."""
    old_pid: int
    pid: int
    signal: str
    """How the old process was ended: ``SIGTERM`` (a clean stop) or ``SIGKILL`` (a crash)."""

    def to_doc(self) -> dict[str, Any]:
        """The control socket's answer (camelCase, like the sim's other JSON)."""
        return {
            "component": self.component,
            "downSeconds": round(self.down_s, 3),
            "oldPid": self.old_pid,
            "pid": self.pid,
            "signal": self.signal,
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Restarted:
        """Parse ``to_doc``'s answer."""
        return cls(
            component=str(doc["component"]),
            down_s=float(doc["downSeconds"]),
            old_pid=int(doc["oldPid"]),
            pid=int(doc["pid"]),
            signal=str(doc["signal"]),
        )
