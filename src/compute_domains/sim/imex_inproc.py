"""The IMEX stand-in run in-process: a daemon's launcher for virtual nodes (no process per IMEX).

In the simulator's virtual-node mode many nodes' daemons share one process, so ``nvidia-imex``
cannot be a child process each. :class:`InProcessImex` answers the daemon's launcher calls
(``daemon.launcher.Launcher``, matched by shape: ``sim`` imports no component) with the
stand-in's own classes: ``spawn(["nvidia-imex", ...])`` runs an ``ImexDaemon`` as an asyncio
task whose log lines arrive on the child's ``stderr`` as they would through a pipe; signals are
delivered to it as the process would have received them (``ImexDaemon.deliver``); SIGKILL
cancels it. ``run(["nvidia-imex-ctl", ..., "-q"])`` asks the daemon's command service exactly
as the ctl program does (``imex_ctlbase.query``, in a worker thread).

Keepalive: the links of in-process daemons ping every ``IN_PROCESS_PING_INTERVAL`` seconds
instead of every second. Every daemon of the process shares one event loop, so an idle
per-clique cluster's pings (18 links a node, a ping and a pong each) were most of a node host's
CPU: 1,152 nodes of shared IMEX kept about 41,000 messages a second in flight and the host's
kubelets, plugins and agents waited behind them (issue 28: the per-clique install and formation
at 1,152 and 2,304 nodes). A stopped virtual node closes its sockets, which its peers see at once;
only the ``hang`` fault (a daemon that stops answering) is found later: within
``IN_PROCESS_PING_TIMEOUT`` instead of 4 s. Process nodes keep the stand-in's defaults.

Invariant: the command line is parsed by the stand-in's own parsers, so a flag the program
would refuse fails here the same way (exit status 2). Paths on the command line are the
launching daemon's own and used as given; the paths a program finds by itself are the
container's, opened where the container's mounts put them (``host_path``): the stand-in's
default hosts file ``/etc/hosts`` and the files its config names (``IMEX_NODE_CONFIG_FILE``,
which every container of the domain reads as ``/imexd/nodes.cfg``). Only ``nvidia-imex`` and
``nvidia-imex-ctl`` (by base name) are known; any other program is missing
(FileNotFoundError / 127), as in a container without it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import itertools
import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from compute_domains.sim import imex, imex_config, imex_ctl, imex_ctlbase, imex_daemon

_IMEX = "nvidia-imex"
_CTL = "nvidia-imex-ctl"
_DEFAULT_HOSTS = Path("/etc/hosts")
IN_PROCESS_PING_INTERVAL = 10.0
"""Seconds between an idle link's pings in-process (module docstring)."""
IN_PROCESS_PING_TIMEOUT = 30.0
"""Seconds without a pong before an in-process link counts its peer as hung."""
_FIRST_PID = 1 << 22
"""First stand-in pid of a launcher's children: above Linux's largest pid (2**22), so never a
real process's."""


class _Feed(io.StringIO):
    """A text stream whose writes arrive on an ``asyncio.StreamReader`` (a pipe's read end)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        super().__init__()
        self._reader = reader

    def write(self, text: str) -> int:
        if not self._reader.at_eof():
            self._reader.feed_data(text.encode())
        return len(text)

    def close(self) -> None:
        if not self._reader.at_eof():
            self._reader.feed_eof()
        super().close()


class ImexChild:
    """One in-process ``nvidia-imex``: the shape of ``asyncio.subprocess.Process`` the daemon's
    supervisor uses."""

    def __init__(
        self, daemon: imex_daemon.ImexDaemon, stderr: asyncio.StreamReader, pid: int
    ) -> None:
        self.pid = pid
        self.stdout: asyncio.StreamReader | None = asyncio.StreamReader()
        self.stderr: asyncio.StreamReader | None = stderr
        self.returncode: int | None = None
        self._daemon = daemon
        self._task = asyncio.create_task(self._run(), name=f"nvidia-imex:{self.pid}")

    async def _run(self) -> None:
        try:
            rc = await self._daemon.run()
        except asyncio.CancelledError:
            rc = -signal.SIGKILL
        except Exception as err:  # a crash of the program is its exit, as for a process
            assert self.stderr is not None
            self.stderr.feed_data(f"nvidia-imex crashed: {err!r}\n".encode())
            rc = 1
        self.returncode = rc
        for stream in (self.stdout, self.stderr):
            if stream is not None and not stream.at_eof():
                stream.feed_eof()

    async def wait(self) -> int:
        """Wait until the daemon ended; its exit status."""
        await asyncio.shield(self._task)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Deliver ``sig``; SIGKILL ends it at once."""
        if self.returncode is not None:
            raise ProcessLookupError(self.pid)
        if sig == signal.SIGKILL:
            self._task.cancel()
        else:
            self._daemon.deliver(sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)


class InProcessImex:
    """A daemon's launcher that runs the IMEX stand-in in this process."""

    def __init__(
        self,
        host_path: Callable[[Path], Path],
        *,
        ping_interval: float = IN_PROCESS_PING_INTERVAL,
        ping_timeout: float = IN_PROCESS_PING_TIMEOUT,
    ) -> None:
        """Args: host_path: where a path inside the container is (``View.host_path``): the
        stand-in's default hosts file, ``/etc/hosts``, and the paths its config names are the
        container's. Paths on its command line are the launching daemon's own, used as given.
        ping_interval, ping_timeout: the links' keepalive here (module docstring)."""
        self._host_path = host_path
        self._ping = (ping_interval, ping_timeout)
        self._pids = itertools.count(_FIRST_PID)
        self._ctl_parser = imex.ctl_parser()

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None,
        cwd: Path | None,
        parent_death_signal: int | None,
    ) -> ImexChild:
        """Start ``nvidia-imex <args>`` as a task (env, cwd and the death signal have no
        meaning in-process: it ends with this process).

        Raises:
            FileNotFoundError: not ``nvidia-imex``.
            OSError: its command line is refused.
        """
        del env, cwd, parent_death_signal
        if not argv or Path(argv[0]).name != _IMEX:
            raise FileNotFoundError(2, f"{argv[0] if argv else '?'}: no such program here")
        try:
            args = imex.parse_imex(argv[1:])
        except SystemExit as exit_:
            raise OSError(f"nvidia-imex refused its arguments (status {exit_.code})") from None
        options = imex.imex_options(args)
        if options.hosts_file == _DEFAULT_HOSTS:  # the stand-in's default: the container's
            options = _with_hosts(options, self._host_path(_DEFAULT_HOSTS))
        options = dataclasses.replace(
            options, ping_interval=self._ping[0], ping_timeout=self._ping[1]
        )
        stderr = asyncio.StreamReader()
        daemon = imex_daemon.ImexDaemon(
            options,
            stream=_Feed(stderr),
            own_signals=False,
            paths=self._host_path,
        )
        return ImexChild(daemon, stderr, next(self._pids))

    async def run(self, argv: Sequence[str], timeout: float) -> tuple[int, str]:
        """``nvidia-imex-ctl <args>`` (``-q`` and ``-N``) to its end: (status, merged output)."""
        if not argv or Path(argv[0]).name != _CTL:
            return 127, f"{argv[0] if argv else '?'}: not found\n"
        try:
            options = imex.ctl_options(argv[1:], self._ctl_parser)
        except SystemExit as exit_:
            return int(exit_.code or 2), "usage error\n"
        except imex_ctlbase.CtlError as failure:
            return failure.status, f"{failure}\n"
        if options.action not in ("q", "N"):
            return 2, f"{_CTL}: only -q and -N run in-process\n"
        out = io.StringIO()
        try:
            async with asyncio.timeout(timeout + 1.0):
                bounded = _with_timeout(options, timeout)
                if options.action == "N":
                    status = await imex_ctl.run_ctl(bounded, out, out, self._host_path)
                    return status, out.getvalue()
                await imex_ctlbase.aquery(bounded, out, self._host_path)
        except imex_ctlbase.CtlError as failure:
            out.write(f"{failure}\n")
            return failure.status, out.getvalue()
        except TimeoutError:
            return 124, out.getvalue()
        return 0, out.getvalue()


def _with_hosts(options: imex_config.ImexOptions, hosts: Path) -> imex_config.ImexOptions:
    return dataclasses.replace(options, hosts_file=hosts)


def _with_timeout(options: imex_ctlbase.CtlOptions, timeout: float) -> imex_ctlbase.CtlOptions:
    if options.timeout is not None and options.timeout <= timeout:
        return options
    return dataclasses.replace(options, timeout=timeout)
