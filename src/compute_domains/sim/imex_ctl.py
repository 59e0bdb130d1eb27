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
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import os
from pathlib import Path
from typing import Literal, TextIO

from compute_domains.sim import imex_config, imex_log, imex_report, imex_wire

Action = Literal["q", "N", "n"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CtlOptions:
    """What one ``nvidia-imex-ctl`` invocation was asked to do."""

    action: Action
    config_path: Path
    tcp: tuple[str, int] | None = None
    unix: str | None = None
    json: bool = False
    host_names: bool = False
    timeout: float | None = None
    """Seconds to wait for the daemon; None waits indefinitely."""


class CtlError(Exception):
    """A failure to report, with the exit status to use."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True, slots=True)
class _Endpoint:
    tcp: tuple[str, int] | None
    unix: str | None

    def __str__(self) -> str:
        return f"{self.tcp[0]}:{self.tcp[1]}" if self.tcp else str(self.unix)


def _endpoint(opts: CtlOptions, config: imex_config.ImexConfig | None) -> _Endpoint:
    if opts.tcp is not None or opts.unix is not None:
        return _Endpoint(opts.tcp, opts.unix)
    assert config is not None
    if not config.cmd_enabled:
        raise CtlError(f"IMEX command service is not enabled in {config.path}")
    if config.cmd_port is not None:
        return _Endpoint((config.cmd_bind_ip or "127.0.0.1", config.cmd_port), None)
    if config.cmd_unix_path:
        return _Endpoint(None, config.cmd_unix_path)
    raise CtlError(f"No IMEX command service endpoint configured in {config.path}")


async def _ask(endpoint: _Endpoint, request: imex_wire.Message) -> imex_wire.Message:
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


def _load(
    opts: CtlOptions, *, nodes_needed: bool
) -> tuple[imex_config.ImexConfig | None, list[str]]:
    direct = opts.tcp is not None or opts.unix is not None
    if direct and not nodes_needed:
        return None, []
    try:
        config = imex_config.load_config(opts.config_path)
    except OSError as err:
        raise CtlError(f"Failed to open config file {opts.config_path}: {err.strerror}") from err
    try:
        entries = imex_config.read_nodes_file(config.node_config_file)
    except OSError as err:
        status = 255 if opts.action != "q" else 1
        raise CtlError(
            f"Failed to read node configuration file {config.node_config_file}", status
        ) from err
    return config, entries


async def _query(opts: CtlOptions, out: TextIO) -> None:
    config, _ = _load(opts, nodes_needed=False)
    endpoint = _endpoint(opts, config)
    try:
        async with asyncio.timeout(opts.timeout):
            reply = await _ask(endpoint, {"t": "query"})
    except (OSError, TimeoutError, imex_wire.ProtocolError) as err:
        if isinstance(err, OSError) and err.errno:
            reason = os.strerror(err.errno)
        else:
            reason = str(err) or "timed out"
        raise CtlError(f"Failed to query the IMEX command service at {endpoint}: {reason}") from err
    out.write(f"{reply.get('state', imex_report.UNAVAILABLE)}\n")


async def _domain(opts: CtlOptions, out: TextIO) -> None:
    config, entries = _load(opts, nodes_needed=True)
    endpoint = _endpoint(opts, config)
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


async def run_ctl(opts: CtlOptions, out: TextIO, err: TextIO) -> int:
    """Carry out one invocation; its exit status."""
    try:
        if opts.action == "q":
            await _query(opts, out)
        elif opts.action == "N":
            await _domain(opts, out)
        else:
            loop = asyncio.get_running_loop()
            deadline = None if opts.timeout is None else loop.time() + opts.timeout
            while deadline is None or loop.time() < deadline:
                await _domain(opts, out)
                await asyncio.sleep(1.0)
    except CtlError as failure:
        err.write(f"{failure}\n")
        return failure.status
    return 0
