"""The container runtime of simulated nodes and of ``cdctl validate``: local processes, own view.

A container is started through ``container_init``, which (as root) gives it a private mount
namespace with CDI device nodes, volume mounts and the pod's ``/etc/hosts``; its output goes to
a log file that ``kubectl logs`` reads back. The image decides what runs (see ``sim.images``):
the project's own image runs the project's entry points, ``pause`` sleeps, anything else runs
the container's command with the host's tools. A command that does not exist fails the
container with exit code 127, as a real runtime reports a start error.

Size: about 360 lines for one role, running containers; the container model beside it is what
callers hand to this runtime, and ``ContainerChild`` what it hands back (a process here; an
in-process task in ``containers.virtual``, the virtual-node runtime built on this one).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import compute_domains
from compute_domains.containers import procs
from compute_domains.infra import subproc

logger = logging.getLogger(__name__)

SYSTEM_DIRS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/root",
    "/home",
    "/work",
    "/srv",
)
"""Host folders every container sees read-only (the "image" of a simulated container)."""
_EXEC_WAIT_S = 60.0
"""How long a container may take to build its view and exec (a loaded machine with many
containers starting at once); past it the container is reported running anyway."""
_SESSION_FILE = "session"
"""Per-container record of its session: ``<pid> <start time>``."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RuntimeSettings:
    """How containers are run on one simulated node."""

    isolate: bool
    """Private mount namespace per container (needs root); False runs on the host's view."""
    python: str = sys.executable
    """Interpreter that runs ``container_init`` and the project's entry points."""
    extra_system_dirs: tuple[str, ...] = ()
    """More host folders to show read-only (e.g. where the interpreter lives)."""
    node_proc: Path | None = None
    """The node's procfs stand-ins (``devices``, ``driver/``), shown over the container's
    ``/proc/devices`` and ``/proc/driver`` as a real host's kernel would show them."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Mount:
    """A host path shown at ``target`` inside the container."""

    source: str
    target: str
    readonly: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DeviceNode:
    """A device node created inside the container (from a CDI edit)."""

    path: str
    major: int
    minor: int
    type: str = "c"
    mode: int = 0o666


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ContainerConfig:
    """Everything needed to start one container process."""

    argv: tuple[str, ...]
    env: dict[str, str]
    image_root: str = ""
    """Folder of the image's own files (a mapped image), laid over the host's; "" for none."""
    workdir: str = ""
    hostname: str = ""
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    address: str = ""
    """The container's IPv4 address (its pod IP, the node's for ``hostNetwork``): wildcard
    binds land there (``containers.netbind``), as in a network namespace of its own; "" for none."""


class Exit(Protocol):
    """What is waited on for a container's end (a process, or an in-process task's stand-in)."""

    @property
    def returncode(self) -> int | None:
        """Exit status once it ended; None while it runs."""

    async def wait(self) -> int:
        """Wait for the end; the exit status."""


class ContainerChild(Protocol):
    """A container's first program as the kubelet handles it (``procs.Child`` for a process;
    ``containers.virtual`` for an in-process one)."""

    @property
    def name(self) -> str:
        """The container's runtime id."""

    @property
    def pid(self) -> int:
        """Its process id (an in-process container has a stand-in number)."""

    @property
    def proc(self) -> Exit:
        """Its exit."""

    async def stop(self, grace: float = 10.0) -> int:
        """SIGTERM semantics, ``grace`` seconds, then SIGKILL semantics; the exit status."""

    def kill(self) -> None:
        """SIGKILL semantics, without waiting."""

    def end_group(self) -> None:
        """End what is left of the container once its first program ended."""

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of its log."""


@dataclasses.dataclass(slots=True)
class Running:
    """A started container: its process, log file and spec (for exec probes)."""

    child: ContainerChild
    spec_path: Path


def _system_dirs(settings: RuntimeSettings) -> list[str]:
    dirs = [d for d in (*SYSTEM_DIRS, *settings.extra_system_dirs) if Path(d).exists()]
    # This installation must be visible inside: the interpreter, its environment and the folder
    # the compute_domains package is imported from (an editable checkout may live anywhere,
    # e.g. a CI clone under /tmp).
    root = Path(compute_domains.__file__).resolve().parents[1]
    package_root = str(root.parent if root.name == "src" else root)  # a checkout: all of it
    for path in (sys.prefix, sys.base_prefix, package_root):
        if not any(path == d or path.startswith(d + "/") for d in dirs):
            dirs.append(path)
    return dirs


class Runtime:
    """Starts and execs into simulated containers of one node."""

    def __init__(self, settings: RuntimeSettings, state_dir: Path) -> None:
        self._s = settings
        self._dir = state_dir
        self._system = _system_dirs(settings)

    def container_dir(self, cid: str) -> Path:
        """Per-container folder (spec, rootfs mount points, private /tmp)."""
        return self._dir / cid

    def _spec(self, cid: str, cfg: ContainerConfig) -> dict[str, object]:
        cdir = self.container_dir(cid)
        tmp = cdir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        tmp.chmod(0o1777)
        mounts = [dataclasses.asdict(m) for m in cfg.mounts]
        # /tmp first: host folders shown under /tmp (a sim home there) are bound on top of it.
        mounts.insert(0, {"source": str(tmp), "target": "/tmp", "readonly": False})
        proc = self._s.node_proc
        overrides = [
            [str(proc / name), f"/proc/{name}"]
            for name in ("devices", "driver")
            if proc is not None and (proc / name).exists()
        ]
        return {
            "isolate": self._s.isolate,
            "rootfs": str(cdir / "rootfs"),
            "layers": str(cdir / "layers"),
            "image": cfg.image_root,
            "proc": overrides,
            "system": self._system,
            "mounts": mounts,
            "devices": [dataclasses.asdict(d) for d in cfg.devices],
            "env": cfg.env,
            "workdir": cfg.workdir,
            "hostname": cfg.hostname,
            "address": cfg.address,
            "command": list(cfg.argv),
        }

    async def start(self, cid: str, cfg: ContainerConfig, log_path: Path) -> Running:
        """Start the container's process; its output is appended to ``log_path``.

        Returns once the command runs (or failed to exec), not when ``container_init`` merely
        began building the container's view: a kubelet reports a container running after the
        runtime started its process, so output it writes at once is there by the time the pod
        turns Ready (``kubectl wait --for=condition=Ready; kubectl logs``).
        """
        cdir = self.container_dir(cid)
        cdir.mkdir(parents=True, exist_ok=True)
        spec_path = cdir / "spec.json"
        spec_path.write_text(json.dumps(self._spec(cid, cfg)))
        exec_r, exec_w = os.pipe()
        try:
            child = await procs.start(
                cid,
                [
                    *(self._s.python, "-m", "compute_domains.containers.container_init"),
                    *("run", str(spec_path), str(exec_w)),
                ],
                log_path=log_path,
                preexec=False,
                group=True,
                pass_fds=(exec_w,),
            )
        finally:
            os.close(exec_w)
        try:
            await _closed(exec_r, cid)
        except BaseException:
            child.kill()  # cancelled while it sets up: it must not run on unwatched
            raise
        finally:
            os.close(exec_r)
        # Its session id (= its pid, once it called setsid) and start time, so the processes
        # of a container whose agent died can still be found and ended (``kill_leftovers``).
        (cdir / _SESSION_FILE).write_text(f"{child.pid} {procs.start_time(child.pid)}\n")
        return Running(child=child, spec_path=spec_path)

    def _enter_argv(self, running: Running, argv: Sequence[str]) -> list[str]:
        """How to run ``argv`` in a container's view: util-linux ``nsenter`` (a C program, so
        frequent exec probes stay cheap) into its mount and UTS namespaces and root, with the
        container's own environment; ``container_init enter`` without namespaces."""
        nsenter = shutil.which("nsenter")
        if self._s.isolate and nsenter:
            env = json.loads(running.spec_path.read_text())["env"]
            return [
                nsenter,
                "-t",
                str(running.child.pid),
                "-m",
                "-u",
                "-r",
                "-w",
                "env",
                "-i",
                *(f"{k}={v}" for k, v in env.items()),
                *argv,
            ]
        return [
            self._s.python,
            "-m",
            "compute_domains.containers.container_init",
            "enter",
            str(running.spec_path),
            str(running.child.pid),
            "--",
            *argv,
        ]

    async def spawn(
        self, running: Running, argv: Sequence[str], *, stdin: bool, merge_stderr: bool
    ) -> asyncio.subprocess.Process:
        """Start ``argv`` in a running container's view with piped stdio (``kubectl exec``).

        It leads a session of its own, so ``procs.kill_session(proc.pid)`` ends all it started.
        """
        return await asyncio.create_subprocess_exec(
            *self._enter_argv(running, argv),
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
            start_new_session=True,
        )

    async def exec(
        self,
        running: Running,
        argv: Sequence[str],
        timeout: float,
    ) -> tuple[int, str]:
        """Run ``argv`` inside a running container's view; (exit code, output). 124 on timeout."""
        # container_init sets the parent-death signal itself (no Python between fork and exec
        # in this gRPC-using process).
        return await subproc.run_merged(
            self._enter_argv(running, argv), timeout, timed_out_output="probe timed out"
        )

    def remove(self, cid: str) -> None:
        """Remove a stopped container's folder (its mounts died with its namespace)."""
        shutil.rmtree(self.container_dir(cid), ignore_errors=True)


async def _closed(fd: int, cid: str) -> None:
    """Wait until the write end of pipe ``fd`` is closed everywhere (EOF)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, readable)
    try:
        async with asyncio.timeout(_EXEC_WAIT_S):
            await ready
    except TimeoutError:
        logger.warning("container %s: no exec after %.0fs; reported running", cid, _EXEC_WAIT_S)
    finally:
        loop.remove_reader(fd)


def kill_leftovers(state_dir: Path) -> int:
    """End every process of the containers recorded under ``state_dir`` (a node's container
    folder); returns how many processes were killed.

    For a node agent that died without stopping its containers (a killed sim supervisor): its
    containers' first processes die with it (parent-death signal), but what they started would
    live on, re-parented to PID 1. A recorded session whose leader still runs with another start
    time belongs to a process that reused the pid: it is left alone.
    """
    killed = 0
    for record in state_dir.glob(f"*/{_SESSION_FILE}"):
        try:
            pid_text, started = record.read_text().split()
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        now = procs.start_time(pid)
        if now is not None and str(now) != started:
            continue
        killed += procs.kill_session(pid)
    return killed
