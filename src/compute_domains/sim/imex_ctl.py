"""The simulated ``nvidia-imex-ctl``: ask the local IMEX command service and print the answer.

``-q`` prints exactly the daemon's state word and a newline (``READY\\n`` only when ready) and
exits 0 once a daemon answered; when none answers it prints why and exits 1. ``-N`` asks the local
daemon for the whole domain (it gathers its peers' rows) and prints the text table, or JSON with
``-j``; when the local daemon does not answer, every configured node is ``UNAVAILABLE`` and the
domain ``DOWN``. A node config that cannot be read prints ``Failed to read node configuration
file`` and exits 1 (``-q``) or 255 (``-N``). ``-n`` repeats ``-N`` every second.

The endpoint comes from ``-i IP PORT``, ``-u PATH`` or the daemon config (``-c``, default
``/etc/nvidia-imex/config.cfg``): ``IMEX_CMD_BIND_INTERFACE_IP`` (127.0.0.1 when empty) and
``IMEX_CMD_PORT``, else ``IMEX_CMD_UNIX_DOMAIN_PATH``. Like the real tool this waits for a wedged
daemon indefinitely; ``-t <ms>`` (a simulator extension for ``-q``/``-N``) bounds the wait.
Options, endpoint and ``-q`` live in the asyncio-free ``imex_ctlbase`` (the probe path).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from compute_domains.sim import imex_ctlbase, imex_log, imex_report, imex_wire

CtlOptions = imex_ctlbase.CtlOptions
CtlError = imex_ctlbase.CtlError


async def _ask(endpoint: imex_ctlbase.Endpoint, request: imex_wire.Message) -> imex_wire.Message:
    if endpoint.tcp is not None:
        reader, writer = await asyncio.open_connection(*endpoint.tcp)
    else:
        assert endpoint.unix is not None
        reader, writer = await asyncio.open_unix_connection(endpoint.unix)
    try:
        await imex_wire.send(writer, request)
        reply = await imex_wire.recv(reader)
    finally:
        await imex_wire.close(writer)
    if reply is None:
        raise imex_wire.ProtocolError("connection closed without an answer")
    return reply


async def _domain(
    opts: imex_ctlbase.CtlOptions, out: TextIO, paths: Callable[[Path], Path] | None = None
) -> None:
    config, entries = imex_ctlbase.load(opts, nodes_needed=True, paths=paths)
    endpoint = imex_ctlbase.endpoint(opts, config)
    request = {"t": "domain", "hostnames": opts.host_names}
    rows = [imex_report.NodeRow.unavailable(k, host) for k, host in enumerate(entries)]
    local_id: int | None = None
    try:
        async with asyncio.timeout(opts.timeout):
            reply = await _ask(endpoint, request)
    except (OSError, TimeoutError, imex_wire.ProtocolError):
        pass  # the local daemon is down: every node is reported UNAVAILABLE, domain DOWN
    else:
        if reply.get("t") == "report":
            rows = [imex_report.NodeRow.from_message(node) for node in reply.get("nodes", [])]
            local_id = int(reply.get("local", -1))
    stamp = imex_log.short_stamp(datetime.datetime.now())
    if opts.json:
        out.write(imex_report.format_json(rows, timestamp=stamp))
    else:
        text = imex_report.format_text(
            rows, local_id=local_id, timestamp=stamp, show_host_names=opts.host_names
        )
        out.write(text)
    out.flush()


async def run_ctl(
    opts: imex_ctlbase.CtlOptions,
    out: TextIO,
    err: TextIO,
    paths: Callable[[Path], Path] | None = None,
) -> int:
    """Carry out one invocation; its exit status (``paths``: where this process opens a file
    the config names, as ``imex_ctlbase.load`` takes it)."""
    try:
        if opts.action == "q":
            imex_ctlbase.query(opts, out, paths)
        elif opts.action == "N":
            await _domain(opts, out, paths)
        else:
            loop = asyncio.get_running_loop()
            deadline = None if opts.timeout is None else loop.time() + opts.timeout
            while deadline is None or loop.time() < deadline:
                await _domain(opts, out, paths)
                await asyncio.sleep(1.0)
    except imex_ctlbase.CtlError as failure:
        err.write(f"{failure}\n")
        return failure.status
    return 0
