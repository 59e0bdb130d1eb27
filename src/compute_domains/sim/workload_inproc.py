"""``mnnvl-workload`` on a virtual node: the stand-in's own code as a task of the sim's process.

A process per workload pod costs an interpreter (tens of MiB, a CPU-second to start on this
machine) plus one more for every later IMEX query; at hundreds of pods that, not the driver,
decides what a virtual-node sim can hold (issue 15). Here the same ``workload.Workload`` runs
with what its container would have, taken from the container's view instead of a process's:

* the channel device nodes are the ones the runtime would create in the container's ``/dev``
  (the CDI edits of its claims: ``View.devices``), listed as the process lists ``/dev``;
* files (``/imexd/imexd.cfg``, the container's ``/tmp``) through its mounts (``View.host_path``);
* the RDMA NICs are those in the pod's own ``/sys/class/net`` view, where DRANET's stand-in
  moves them (none when that path is not mounted: the machine's own sysfs is not the pod's);
* the ``-N`` query is the simulated ctl's own code (``imex_ctl.run_ctl``) over the same TCP
  command port, without starting a process;
* its output lines go to the container's log, as a process's stdout would.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path, PurePosixPath

from compute_domains.containers import virtual
from compute_domains.sim import imex_ctl, imex_ctlbase, transport, workload

QUERY_TIMEOUT_S = 5.0
"""The ``-t 5000`` the process form passes to the ctl."""


class _LogWriter(io.TextIOBase):
    """A text stream onto the container's log (the program's stdout)."""

    def __init__(self, view: virtual.View) -> None:
        self._sink = view.log

    def write(self, text: str) -> int:
        if self._sink is not None:
            self._sink.write(text)
        return len(text)


def channels_of(view: virtual.View, channel_dir: str) -> list[workload.Channel]:
    """The channel char devices the container was given under ``channel_dir``, by number."""
    root = PurePosixPath(channel_dir)
    found = [
        workload.Channel(d.path, d.major, d.minor)
        for d in view.devices
        if d.type == "c"
        and PurePosixPath(d.path).parent == root
        and workload.is_channel_name(PurePosixPath(d.path).name)
    ]
    return sorted(found, key=lambda c: c.minor)


def nics_of(view: virtual.View) -> list[str]:
    """The RDMA NICs in the container's ``/sys/class/net`` (its pod's view), if it has one."""
    if not view.mounted(transport.NET_DIR):
        return []
    return transport.rdma_nics(view.host_path(transport.NET_DIR))


async def run(view: virtual.View) -> int:
    """Run the stand-in for the container ``view`` until it is stopped (exit status 0)."""
    args = workload.parser().parse_args(list(view.argv[1:]))
    out = _LogWriter(view)

    async def query(cfg: Path) -> str:
        answer, errors = io.StringIO(), io.StringIO()
        opts = imex_ctlbase.CtlOptions(
            action="N", config_path=view.host_path(cfg), timeout=QUERY_TIMEOUT_S
        )
        await imex_ctl.run_ctl(opts, answer, errors, paths=view.host_path)
        return answer.getvalue() + errors.getvalue()

    program = workload.Workload(
        args,
        view.env,
        out,
        path=view.host_path,
        found_channels=lambda: channels_of(view, args.channel_dir),
        found_nics=lambda: nics_of(view),
        query=query,
        hostname=view.hostname,
    )
    try:
        return await program.run()
    except asyncio.CancelledError:
        out.write("mnnvl-workload: stopping\n")  # as the process prints after SIGTERM
        raise
