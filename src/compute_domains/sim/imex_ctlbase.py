"""The light half of the simulated ``nvidia-imex-ctl``: options, endpoint, config, ``-q``.

(A plain ``-q`` run, the drivers' readiness check, does not even get here: ``imex_main`` answers
it through ``imex_query``, whose functions this module uses for the same answers.)

``nvidia-imex-ctl -q`` is what the daemon's readiness probe runs every second on every node, so
it is served synchronously here with plain sockets and never imports asyncio (which alone costs
about 80 ms of CPU per run); the real tool is a native binary that costs next to nothing, and
the simulator should not make probes look expensive. ``imex_ctl`` builds ``-N``/``-n`` on top.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TextIO

from compute_domains.sim import imex_config, imex_query

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


CtlError = imex_query.QueryError
"""A failure to report, with the exit status to use."""


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the command service listens: TCP (ip, port) or a Unix socket path."""

    tcp: tuple[str, int] | None
    unix: str | None

    def __str__(self) -> str:
        return f"{self.tcp[0]}:{self.tcp[1]}" if self.tcp else str(self.unix)


def endpoint(opts: CtlOptions, config: imex_config.ImexConfig | None) -> Endpoint:
    """The command endpoint from ``-i``/``-u`` or the config (raises CtlError when none)."""
    if opts.tcp is not None or opts.unix is not None:
        return Endpoint(opts.tcp, opts.unix)
    assert config is not None
    cmd = (config.cmd_enabled, config.cmd_bind_ip, config.cmd_port, config.cmd_unix_path)
    return Endpoint(*imex_query.endpoint_of(cmd, str(config.path)))


def load(
    opts: CtlOptions, *, nodes_needed: bool, paths: Callable[[Path], Path] | None = None
) -> tuple[imex_config.ImexConfig | None, list[str]]:
    """The config and node entries the invocation needs (CtlError with the tool's wording);
    ``paths``: where this process opens a file the config names (as named by default)."""
    direct = opts.tcp is not None or opts.unix is not None
    if direct and not nodes_needed:
        return None, []
    try:
        config = imex_config.load_config(opts.config_path)
    except OSError as err:
        raise CtlError(f"Failed to open config file {opts.config_path}: {err.strerror}") from err
    nodes_file = config.node_config_file if paths is None else paths(config.node_config_file)
    try:
        entries = imex_config.read_nodes_file(nodes_file)
    except OSError as err:
        status = 255 if opts.action != "q" else 1
        raise CtlError(
            f"Failed to read node configuration file {config.node_config_file}", status
        ) from err
    return config, entries


def query(opts: CtlOptions, out: TextIO, paths: Callable[[Path], Path] | None = None) -> None:
    """``-q``: print the local daemon's state word (``imex_query.query``; ``paths`` as for
    :func:`load`).

    Raises:
        CtlError: No config, no endpoint, or no daemon answered (the message to print).
    """
    config, _ = load(opts, nodes_needed=False, paths=paths)
    where = endpoint(opts, config)
    imex_query.query((where.tcp, where.unix), opts.timeout, out)


async def aquery(
    opts: CtlOptions, out: TextIO, paths: Callable[[Path], Path] | None = None
) -> None:
    """``query`` from a coroutine (``imex_query.aquery``); the same errors."""
    config, _ = load(opts, nodes_needed=False, paths=paths)
    where = endpoint(opts, config)
    await imex_query.aquery((where.tcp, where.unix), opts.timeout, out)
