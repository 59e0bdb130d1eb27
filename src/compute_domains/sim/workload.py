"""``mnnvl-workload``: a stand-in for a user's multi-node NVLink program (the seed's container).

It prints, as clear lines, what a real MNNVL program depends on, then keeps running until
SIGTERM (exit 0), reporting changes of the IMEX domain state:

1. **IMEX channels**: the ``/dev/nvidia-caps-imex-channels/channel*`` char devices the
   container was given (major:minor). No channel means CUDA fabric-memory calls would fail.
2. **Rank**: from ``--rank``, else the first of ``RANK``, ``OMPI_COMM_WORLD_RANK``,
   ``PMIX_RANK``, ``JOB_COMPLETION_INDEX`` (Indexed Job), else the local IMEX daemon's node ID
   (unique while one pod runs per node, as in the seed's Deployment), else a StatefulSet-style
   hostname ordinal (``name-<n>``); the line says which source was used.
3. **IMEX domain**: asks the *local* IMEX daemon for the whole domain (``nvidia-imex-ctl -N``,
   whose text marks the answering node with ``*``): the domain state, how many configured nodes
   are READY, and this node's ID. It waits up to ``--wait`` seconds for ``UP``, as a real job
   would before importing peers' memory (not with ``NCCL_MNNVL_ENABLE=0``: no import then).
   The daemon's command endpoint must be visible:
   ``--imex-config``/``COMPUTE_DOMAIN_IMEX_CONFIG`` (a daemon config, default
   ``/imexd/imexd.cfg`` when present), else ``COMPUTE_DOMAIN_IMEX_ADDRESS`` (``ip[:port]``).
   Today nothing injects either into workload containers; the program then says so and only
   reports what it can see.

4. **Transport**: which peers NCCL would reach how (``NCCL_MNNVL_ENABLE=2``, the guide's §15.5:
   MNNVL inside the NVLink domain, RDMA across): over MNNVL the READY nodes of its IMEX domain;
   the rest of ``WORLD_SIZE`` (one rank per pod, as in the guide; ``OMPI_COMM_WORLD_SIZE``,
   ``PMIX_SIZE``) falls back to RDMA over the container's RDMA NICs (a ``/sys/class/net``
   interface with an ``device/infiniband`` entry: what DRANET gives), or to sockets without one.
   ``NCCL_MNNVL_ENABLE=0`` sends every peer over the fallback. Printed again on a domain change;
   worded by ``sim.transport``.

The verdict line is ``mnnvl-workload: OK ...`` or ``mnnvl-workload: NOT READY ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import re
import signal
import socket
import stat
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from compute_domains.sim import transport

CHANNEL_DIR = Path("/dev/nvidia-caps-imex-channels")
DEFAULT_CONFIG = Path("/imexd/imexd.cfg")
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "JOB_COMPLETION_INDEX")
# A host wider than its column is followed by "- " with no space ("...-0000- READY").
_NODE_LINE = re.compile(r"^Node #(\d+)\s+([*-])\s+(\S+?)\s*(?:\*\s*)?-\s+(\S+)")
_DOMAIN_LINE = re.compile(r"^Domain State:\s*(\S+)")


@dataclasses.dataclass(frozen=True, slots=True)
class Channel:
    """One IMEX channel device node."""

    path: str
    major: int
    minor: int


@dataclasses.dataclass(frozen=True, slots=True)
class Domain:
    """The local daemon's view of its domain (``nvidia-imex-ctl -N``)."""

    state: str
    nodes: dict[int, tuple[str, str]]
    """Node ID → (host, status) for every configured node."""
    local: int | None

    @property
    def ready(self) -> int:
        """Configured nodes whose status is READY."""
        return sum(1 for _, status in self.nodes.values() if status == "READY")

    def describe(self) -> str:
        """``UP, 3/3 nodes READY, this node is #1 (compute-domain-daemon-0001)``."""
        text = f"{self.state}, {self.ready}/{len(self.nodes)} configured nodes READY"
        if self.local is not None and self.local in self.nodes:
            text += f", this node is #{self.local} ({self.nodes[self.local][0]})"
        return text


def is_channel_name(name: str) -> bool:
    """Whether a device node's file name is an IMEX channel's (``channel<N>``)."""
    return name.startswith("channel") and name[7:].isdigit()


def channels(root: Path = CHANNEL_DIR) -> list[Channel]:
    """The char devices ``channel<N>`` under ``root``, by channel number."""
    found = []
    for path in root.glob("channel*"):
        try:
            st = path.stat()
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode) and is_channel_name(path.name):
            found.append(Channel(str(path), os.major(st.st_rdev), os.minor(st.st_rdev)))
    return sorted(found, key=lambda c: c.minor)


def parse_domain(text: str) -> Domain | None:
    """Parse ``nvidia-imex-ctl -N`` text output; None if it holds no domain state."""
    nodes: dict[int, tuple[str, str]] = {}
    local: int | None = None
    state = None
    for line in text.splitlines():
        if m := _NODE_LINE.match(line.strip()):
            node_id = int(m.group(1))
            nodes[node_id] = (m.group(3), m.group(4))
            if m.group(2) == "*":
                local = node_id
        elif m := _DOMAIN_LINE.match(line.strip()):
            state = m.group(1)
    return None if state is None else Domain(state=state, nodes=nodes, local=local)


def rank_from(env: Mapping[str, str], explicit: int | None) -> tuple[int, str] | None:
    """The rank and its source, from the flag or the environment (None: neither says)."""
    if explicit is not None:
        return explicit, "--rank"
    for var in RANK_VARS:
        value = env.get(var, "")
        if value.isdigit():
            return int(value), var
    return None


def hostname_ordinal(hostname: str) -> int | None:
    """The ordinal of a StatefulSet-style name ``<name>-<n>``, else None."""
    m = re.fullmatch(r".+-(0|[1-9]\d{0,5})", hostname)
    return int(m.group(1)) if m else None


class Output(Protocol):
    """Where the program's lines go: its stdout, or a virtual node's container log."""

    def write(self, text: str, /) -> int:
        """Append ``text``; how many characters were taken."""
        ...

    def flush(self) -> None:
        """Push what was written out (each line is the container's log as it happens)."""
        ...


Query = Callable[[Path], Awaitable[str]]
"""Ask the local IMEX daemon named by a daemon config (a path in the container) for ``-N``."""


class Workload:
    """One run of the stand-in (see the module docstring).

    A process runs it on its own container's view (the defaults). On a virtual node
    (``sim.workload_inproc``) the same code runs as a task: ``path`` maps a container path to
    where it is on the node, ``found_channels`` lists the channel device nodes the runtime
    gave the container, ``query`` asks the daemon without a process, ``hostname`` is the pod's.
    """

    def __init__(
        self,
        args: argparse.Namespace,
        env: Mapping[str, str],
        out: Output,
        *,
        path: Callable[[Path], Path] = Path,
        found_channels: Callable[[], list[Channel]] | None = None,
        found_nics: Callable[[], list[str]] | None = None,
        query: Query | None = None,
        hostname: str = "",
    ) -> None:
        self._args = args
        self._env = env
        self._out = out
        self._path = path
        self._channels = found_channels or (lambda: channels(Path(args.channel_dir)))
        self._nics = found_nics or (lambda: transport.rdma_nics(transport.NET_DIR))
        self._ask = query or self._ask_process
        self._hostname = hostname or socket.gethostname()

    def say(self, line: str) -> None:
        """Print one line, flushed (it is the container's log)."""
        self._out.write(f"mnnvl-workload: {line}\n")
        self._out.flush()

    def _ctl_config(self) -> tuple[Path, str] | None:
        """A daemon config naming the local daemon's command endpoint, and where it came from."""
        given = self._args.imex_config or self._env.get("COMPUTE_DOMAIN_IMEX_CONFIG")
        if given:
            return Path(given), f"config {given}"
        if self._path(DEFAULT_CONFIG).is_file():
            return DEFAULT_CONFIG, f"config {DEFAULT_CONFIG}"
        address = self._env.get("COMPUTE_DOMAIN_IMEX_ADDRESS", "")
        if not address:
            return None
        host, _, port = address.rpartition(":") if address.count(":") == 1 else (address, "", "")
        host, port = host or address, port or "50005"
        # Files in the container's own /tmp, named as the container sees them.
        tmp = Path(tempfile.mkdtemp(prefix="mnnvl-", dir=self._path(Path("/tmp"))))
        inside = Path("/tmp") / tmp.name
        (tmp / "nodes.cfg").write_text("")  # -N needs one; it lists only nodes a silent
        # daemon cannot report
        (tmp / "imexd.cfg").write_text(
            f"IMEX_CMD_ENABLED=1\nIMEX_CMD_BIND_INTERFACE_IP={host}\n"
            f"IMEX_CMD_PORT={port}\nIMEX_NODE_CONFIG_FILE={inside / 'nodes.cfg'}\n"
        )
        return inside / "imexd.cfg", f"COMPUTE_DOMAIN_IMEX_ADDRESS={host}:{port}"

    async def _ask_process(self, cfg: Path) -> str:
        # By default the query goes through the simulator's own IMEX client, as a CUDA program
        # talks to IMEX through the driver: a user image has no nvidia-imex-ctl of its own.
        ctl = (
            [self._args.imex_ctl]
            if self._args.imex_ctl
            else [sys.executable, "-m", "compute_domains.sim.imex_main", "ctl"]
        )
        argv = [*ctl, "-c", str(cfg), "-N", "-t", "5000"]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        async with asyncio.timeout(15):
            out, _ = await proc.communicate()
        return out.decode(errors="replace")

    async def _query(self, cfg: Path) -> Domain | None:
        try:
            text = await self._ask(cfg)
        except (OSError, TimeoutError) as err:
            self.say(f"IMEX query failed: {err}")
            return None
        return parse_domain(text)

    async def run(self) -> int:
        """Report, wait for the domain, then follow it until cancelled."""
        self.say(f"host {self._hostname} starting")
        found = self._channels()
        if found:
            shown = ", ".join(f"{c.path} (char {c.major}:{c.minor})" for c in found[:4])
            more = f" and {len(found) - 4} more" if len(found) > 4 else ""
            self.say(f"IMEX channels: {len(found)}: {shown}{more}")
        else:
            self.say(
                f"IMEX channels: none under {self._args.channel_dir} (no ComputeDomain channel)"
            )
        target = self._ctl_config()
        domain: Domain | None = None
        if target is None:
            self.say(
                "IMEX daemon: not visible from this container (no /imexd/imexd.cfg, no "
                "COMPUTE_DOMAIN_IMEX_ADDRESS); cannot check the domain"
            )
        else:
            self.say(f"IMEX daemon: asking the local daemon via {target[1]}")
            # With MNNVL off NCCL imports no peer memory over IMEX: nothing to wait for.
            mnnvl_off = self._env.get("NCCL_MNNVL_ENABLE", "") == "0"
            domain = await self._wait_up(target[0], 0.0 if mnnvl_off else self._args.wait)
        self._report_rank(domain)
        self._report_transport(domain)
        ok = bool(found) and domain is not None and domain.state == "UP"
        verdict = "OK" if ok else "NOT READY"
        self.say(f"{verdict}: channels={len(found)} domain={domain.state if domain else 'unknown'}")
        if target is not None:
            await self._follow(target[0], domain)
        await asyncio.Event().wait()
        return 0

    def _report_rank(self, domain: Domain | None) -> None:
        rank = rank_from(self._env, self._args.rank)
        if rank is None and domain is not None and domain.local is not None:
            rank = domain.local, "local IMEX node ID (one pod per node)"
        if rank is None and (ordinal := hostname_ordinal(self._hostname)) is not None:
            rank = ordinal, "hostname ordinal"
        if rank is None:
            self.say("rank: unknown (no RANK/JOB_COMPLETION_INDEX, no IMEX node ID)")
        else:
            self.say(f"rank: {rank[0]} (from {rank[1]})")

    def _report_transport(self, domain: Domain | None) -> None:
        mnnvl = self._env.get("NCCL_MNNVL_ENABLE", "")
        ready = domain.ready if domain is not None else 0
        world = transport.world_size(self._env)
        self.say(f"transport: {transport.paths(ready, world, self._nics(), mnnvl)}")

    async def _wait_up(self, cfg: Path, wait: float) -> Domain | None:
        loop = asyncio.get_running_loop()
        until = loop.time() + wait
        last: Domain | None = None
        while True:
            domain = await self._query(cfg)
            if domain is not None and (last is None or domain.describe() != last.describe()):
                self.say(f"IMEX domain: {domain.describe()}")
            last = domain or last
            if (domain is not None and domain.state == "UP") or loop.time() >= until:
                return domain
            await asyncio.sleep(2)

    async def _follow(self, cfg: Path, last: Domain | None) -> None:
        while True:
            await asyncio.sleep(self._args.watch)
            domain = await self._query(cfg)
            if domain is not None and (last is None or domain.describe() != last.describe()):
                self.say(f"IMEX domain changed: {domain.describe()}")
                self._report_transport(domain)
                last = domain


def parser() -> argparse.ArgumentParser:
    """The program's command line (also parsed by ``sim.workload_inproc``)."""
    p = argparse.ArgumentParser(prog="mnnvl-workload", description=__doc__.splitlines()[0])
    p.add_argument("--rank", type=int, default=None, help="this process's rank")
    p.add_argument("--imex-config", default=None, help="daemon config naming its endpoint")
    p.add_argument(
        "--imex-ctl", default=None, help="an IMEX ctl tool (default: the simulator's IMEX client)"
    )
    p.add_argument("--channel-dir", default=str(CHANNEL_DIR), help=argparse.SUPPRESS)
    p.add_argument("--wait", type=float, default=120.0, help="seconds to wait for UP")
    p.add_argument("--watch", type=float, default=10.0, help="seconds between later checks")
    return p


def main(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run until SIGTERM/SIGINT; exit status 0."""
    args = parser().parse_args(list(argv))

    async def serve() -> int:
        task = asyncio.create_task(Workload(args, env, sys.stdout).run())
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            return await task
        sys.stdout.write("mnnvl-workload: stopping\n")
        return 0

    return asyncio.run(serve())


if __name__ == "__main__":
    # A stand-in user program: its environment is its input, as for the real one.
    sys.exit(main(sys.argv[1:], os.environ))  # noqa: TID251
