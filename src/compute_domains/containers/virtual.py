"""The virtual-node runtime: known programs run as asyncio tasks of this process, the rest as
processes.

``VirtualRuntime`` has the interface of ``runtime.Runtime`` (start, exec, spawn, remove). For
each container it asks its *programs* table (given by whoever knows the programs: the CLI for
the project's own entry points) whether the container's command can run in-process; if so it
runs that program's coroutine as a task, with the container's :class:`View` (argv, env, where
its paths are on the node), else it starts a process exactly as ``Runtime`` does. ``pause``
(``sleep infinity``) always runs in-process: it only waits.

Semantics kept from a process container:

* its log is the file ``kubectl logs`` reads: the program's log records go there (``infra.
  logroute``: the task runs in a context that names the container's sink);
* stop is SIGTERM semantics: the task is cancelled and given ``grace`` seconds to end (the
  component's graceful stop), then cancelled again until it ends (SIGKILL has no stronger
  form for a task); a program that ends because it was stopped exits 0, as a component does
  after SIGTERM; one killed exits 137; a failure is logged into its log and exits 1;
* exec into an in-process container is refused (exit 126), there is no process view to enter;
  probes of our DaemonSets are ``httpGet`` (no exec).

:meth:`View.host_path` translates a path inside the container to the node's folder it is
mounted from (the longest mount target that contains it, ``/proc/devices`` and
``/proc/driver`` from the node's procfs stand-ins); a path under no mount is the host's own
(the system folders a simulated container sees read-only).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from compute_domains.containers import procs, runtime
from compute_domains.infra import logroute
from compute_domains.infra.kube import informers as kube_informers

logger = logging.getLogger(__name__)

_FIRST_PID = 1 << 23
"""First stand-in pid of a runtime's in-process containers: above Linux's largest (2**22)."""
_PAUSE = ("sleep", "infinity")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class View:
    """What an in-process program knows of its container."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    mounts: tuple[runtime.Mount, ...]
    """Volume and CDI mounts (host source → container target); the first matching the longest
    target wins."""
    address: str = ""
    """The container's IP (its pod IP)."""
    devices: tuple[runtime.DeviceNode, ...] = ()
    """The device nodes a process container would find in its ``/dev`` (CDI edits)."""
    hostname: str = ""
    """The container's host name (its pod's name)."""
    log: logroute.Sink | None = None
    """The container's log (the program sets its level and format from its flags)."""
    informers: kube_informers.Informers | None = None
    """The host's shared caches (one watch per kind for every in-process component of the
    host, issue 28); None: each program opens its own watches, as in its own process."""

    def host_path(self, path: str | Path) -> Path:
        """Where ``path`` (inside the container) is on the node (see the module docstring)."""
        inside = PurePosixPath(path)
        best: runtime.Mount | None = None
        for mount in self.mounts:
            target = PurePosixPath(mount.target)
            if (inside == target or target in inside.parents) and (
                best is None or len(target.parts) > len(PurePosixPath(best.target).parts)
            ):
                best = mount
        if best is None:
            return Path(inside)
        rest = inside.relative_to(PurePosixPath(best.target))
        return Path(best.source) / rest if rest.parts else Path(best.source)

    def mounted(self, path: str | Path) -> bool:
        """True when ``path`` lies under one of the container's mounts."""
        inside = PurePosixPath(path)
        return any(
            inside == PurePosixPath(m.target) or PurePosixPath(m.target) in inside.parents
            for m in self.mounts
        )


Program = Callable[[View], Coroutine[Any, Any, int]]
"""An in-process program: runs until it ends (its exit status) or is cancelled (stopped)."""
Programs = Callable[[View], Program | None]
"""Which in-process program runs a container; None: run it as a process."""


class _Exit:
    def __init__(self, child: TaskChild) -> None:
        self._child = child

    @property
    def returncode(self) -> int | None:
        return self._child.returncode()

    async def wait(self) -> int:
        return await self._child.wait()


class TaskChild:
    """An in-process container's program (``runtime.ContainerChild``)."""

    def __init__(
        self, name: str, program: Program, view: View, sink: logroute.Sink, pid: int
    ) -> None:
        self.name = name
        self.pid = pid
        self.log_path = sink.path
        self._sink = sink
        self._stopping = False
        self._killed = False
        self._task: asyncio.Task[int] = asyncio.create_task(
            self._run(program, view), name=f"container:{name}"
        )
        self._task.add_done_callback(lambda _: sink.close())
        self.proc = _Exit(self)

    async def _run(self, program: Program, view: View) -> int:
        logroute.route_to(self._sink)  # this task's context: the program's records go there
        try:
            return await program(view)
        except asyncio.CancelledError:
            return self._cancelled_status()
        except Exception:
            logger.exception("%s failed", view.argv[0] if view.argv else self.name)
            return 1

    def _cancelled_status(self) -> int:
        return 137 if self._killed or not self._stopping else 0

    def returncode(self) -> int | None:
        """The exit status once the program ended; None while it runs."""
        if not self._task.done():
            return None
        if self._task.cancelled():  # stopped before it ever ran
            return self._cancelled_status()
        return self._task.result()

    async def wait(self) -> int:
        """Wait for the program's end; its exit status."""
        await asyncio.wait({self._task})
        rc = self.returncode()
        assert rc is not None
        return rc

    async def stop(self, grace: float = 10.0) -> int:
        """Cancel (SIGTERM semantics); after ``grace`` seconds cancel again until it ends."""
        if not self._task.done():
            self._stopping = True
            self._task.cancel()
            done, _ = await asyncio.wait({self._task}, timeout=grace)
            while not done:
                logger.warning("%s ignored its stop for %.0fs; cancelling again", self.name, grace)
                self._killed = True
                self._task.cancel()
                done, _ = await asyncio.wait({self._task}, timeout=1.0)
        return await self.wait()

    def kill(self) -> None:
        """Cancel without waiting (SIGKILL semantics)."""
        if not self._task.done():
            self._killed = True
            self._task.cancel()

    def end_group(self) -> None:
        """Nothing outlives an in-process program's task group."""

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of its log."""
        return procs.log_tail(self.log_path, lines)


async def _pause(view: View) -> int:
    await asyncio.Event().wait()
    return 0


class VirtualRuntime(runtime.Runtime):
    """``runtime.Runtime`` whose known programs run in this process (module docstring)."""

    def __init__(
        self,
        settings: runtime.RuntimeSettings,
        state_dir: Path,
        programs: Programs | None = None,
        informers: kube_informers.Informers | None = None,
    ) -> None:
        super().__init__(settings, state_dir)
        self._programs = programs
        self._informers = informers
        self._pids = itertools.count(_FIRST_PID)
        logroute.install()

    def view(self, cid: str, cfg: runtime.ContainerConfig, sink: logroute.Sink | None) -> View:
        """The container's view: its mounts, its private ``/tmp``, the node's procfs."""
        mounts = [runtime.Mount(source=str(self.container_dir(cid) / "tmp"), target="/tmp")]
        proc = self._s.node_proc
        if proc is not None:
            mounts += [
                runtime.Mount(source=str(proc / name), target=f"/proc/{name}")
                for name in ("devices", "driver")
            ]
        return View(
            argv=cfg.argv,
            env=dict(cfg.env),
            mounts=(*mounts, *cfg.mounts),
            address=cfg.address,
            devices=cfg.devices,
            hostname=cfg.hostname,
            log=sink,
            informers=self._informers,
        )

    async def start(
        self, cid: str, cfg: runtime.ContainerConfig, log_path: Path
    ) -> runtime.Running:
        """Run the container in-process when its program is known, else as a process."""
        view = self.view(cid, cfg, None)
        program: Program | None = _pause if cfg.argv == _PAUSE else None
        if program is None and self._programs is not None:
            program = self._programs(view)
        if program is None:
            return await super().start(cid, cfg, log_path)
        (self.container_dir(cid) / "tmp").mkdir(parents=True, exist_ok=True)
        sink = logroute.Sink(log_path)
        child = TaskChild(cid, program, dataclasses.replace(view, log=sink), sink, next(self._pids))
        return runtime.Running(child=child, spec_path=self.container_dir(cid) / "spec.json")

    async def spawn(
        self, running: runtime.Running, argv: Sequence[str], *, stdin: bool, merge_stderr: bool
    ) -> asyncio.subprocess.Process:
        """``kubectl exec`` into a process container; an in-process one has no view to enter.

        Raises:
            OSError: the container runs in-process.
        """
        if isinstance(running.child, TaskChild):
            raise OSError(f"{running.child.name} runs in-process (virtual node): no exec")
        return await super().spawn(running, argv, stdin=stdin, merge_stderr=merge_stderr)

    async def exec(
        self, running: runtime.Running, argv: Sequence[str], timeout: float
    ) -> tuple[int, str]:
        """An exec probe: in a process container as ``Runtime.exec``; refused (126) in-process."""
        if isinstance(running.child, TaskChild):
            return 126, "exec into an in-process container (virtual node) is not supported"
        return await super().exec(running, argv, timeout)

    def remove(self, cid: str) -> None:
        """Remove the container's folder."""
        with contextlib.suppress(OSError):
            super().remove(cid)
