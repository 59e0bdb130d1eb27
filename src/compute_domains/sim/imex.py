"""Simulated ``nvidia-imex`` / ``nvidia-imex-ctl``: command lines and process entry points.

Run them as ``python -m compute_domains.sim.imex_main imex <args>`` and
``python -m compute_domains.sim.imex_main ctl <args>``; the simulator installs two wrapper
scripts named ``nvidia-imex`` and ``nvidia-imex-ctl`` that do exactly that, so the daemon runs
them as it runs the real binaries. In-process callers use :func:`main_imex` / :func:`main_ctl`.

``nvidia-imex`` accepts the real flags ``-c <cfg>``, ``--nogpu``/``-nogpu``, ``--version`` and
``-p/--port``, plus simulator-only flags: ``--hosts-file`` (the simulated container's hosts file,
default ``/etc/hosts``; ``--system-resolver`` uses the system resolver, DNS included, instead),
``--local-address`` (repeatable: the simulated node's addresses), ``--fault-dir`` (fault flag
files, see :mod:`compute_domains.sim.imex_config`), ``--session-file`` (a lock standing for the
node's one IMEX session) and ``--sim-version``.

``nvidia-imex-ctl`` accepts ``-c <cfg>``, ``-i <ip> <port>``, ``-u/--u <path>``, one of
``-q``/``-N``/``-n``, ``-j``, ``-H`` and ``-t <ms>``.

The modules behind this one: ``imex_config`` (options, config, nodes file, resolution, faults),
``imex_wire`` (frames and states), ``imex_log`` (IMEX log lines), ``imex_daemon`` (the daemon),
``imex_links`` (outgoing peer links), ``imex_cmd`` (command service), ``imex_ctl`` and
``imex_report`` (the client and its output).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from compute_domains.sim import imex_query

if TYPE_CHECKING:
    import argparse

    from compute_domains.sim import imex_config, imex_ctlbase

# The daemon and the -N/-n client (asyncio) are imported where they run: ``ctl -q`` is the
# probe path and stays light. argparse (with the shutil, gettext and compression modules it
# pulls in) and the ctl's modules are too: every daemon start of every driver pays its imports,
# and the drivers start it as ``nvidia-imex -c <cfg>``, which :func:`_quick_imex` reads.

DEFAULT_CONFIG = Path(imex_query.DEFAULT_CONFIG)


def _imex_parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(prog="nvidia-imex", description="Simulated IMEX daemon.")
    parser.add_argument("-c", dest="config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--nogpu", "-nogpu", action="store_true", dest="nogpu")
    parser.add_argument("--version", action="store_true")
    parser.add_argument("-p", "--port", type=int, default=None)
    parser.add_argument("--hosts-file", type=Path, default=Path("/etc/hosts"))
    parser.add_argument("--system-resolver", action="store_true")
    parser.add_argument("--local-address", action="append", default=[])
    parser.add_argument("--fault-dir", type=Path, default=None)
    parser.add_argument("--session-file", type=Path, default=None)
    parser.add_argument("--sim-version", default="595.71.05")
    return parser


def ctl_parser() -> argparse.ArgumentParser:
    """``nvidia-imex-ctl``'s argument parser (reusable: a caller that parses often keeps one)."""
    import argparse

    parser = argparse.ArgumentParser(prog="nvidia-imex-ctl", description="Simulated IMEX ctl.")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-c", dest="config", type=Path, default=None)
    where.add_argument("-i", dest="tcp", nargs=2, metavar=("IP", "PORT"), default=None)
    where.add_argument("-u", "--u", dest="unix", default=None)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("-q", dest="action", action="store_const", const="q")
    what.add_argument("-N", dest="action", action="store_const", const="N")
    what.add_argument("-n", dest="action", action="store_const", const="n")
    parser.add_argument("-j", dest="json", action="store_true")
    parser.add_argument("-H", dest="host_names", action="store_true")
    parser.add_argument("-t", dest="timeout_ms", type=int, default=None)
    return parser


def _ignore_early_signals() -> None:
    """Until the daemon's handlers are in place, SIGUSR1/SIGHUP must not kill the process."""
    for sig in (signal.SIGUSR1, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def parse_imex(argv: Sequence[str]) -> argparse.Namespace:
    """``nvidia-imex``'s command line (without the program name).

    Raises:
        SystemExit: a usage error (argparse's), as the program would exit.
    """
    return _imex_parser().parse_args(list(argv))


def imex_options(args: argparse.Namespace) -> imex_config.ImexOptions:
    """The daemon's options from a parsed ``nvidia-imex`` command line."""
    from compute_domains.sim import imex_config

    return imex_config.ImexOptions(
        config_path=args.config,
        nogpu=args.nogpu,
        port=args.port,
        hosts_file=None if args.system_resolver else args.hosts_file,
        local_addresses=tuple(args.local_address),
        fault_dir=args.fault_dir,
        session_file=args.session_file,
        version=args.sim_version,
    )


def _quick_imex(argv: Sequence[str]) -> imex_config.ImexOptions | None:
    """The options of the command lines the drivers and the simulator use, ``-c <cfg>`` and
    ``--hosts-file <path>`` (each at most once, values not starting with ``-``), without
    argparse; None for anything else (argparse then parses it: abbreviations, errors, help).
    The result equals what :func:`imex_options` makes of argparse's parse."""
    from compute_domains.sim import imex_config

    if len(argv) % 2:
        return None
    values = dict(zip(argv[::2], argv[1::2], strict=True))
    if len(values) * 2 != len(argv) or not set(values) <= {"-c", "--hosts-file"}:
        return None
    if any(not v or v.startswith("-") for v in values.values()):
        return None
    return imex_config.ImexOptions(
        config_path=Path(values["-c"]) if "-c" in values else DEFAULT_CONFIG,
        hosts_file=Path(values.get("--hosts-file", "/etc/hosts")),
    )


def main_imex(argv: Sequence[str]) -> int:
    """Run the simulated daemon with ``argv`` (without the program name); its exit status."""
    _ignore_early_signals()
    import asyncio

    from compute_domains.sim import imex_daemon

    options = _quick_imex(argv)
    if options is None:
        args = _imex_parser().parse_args(list(argv))
        if args.version:
            sys.stdout.write(f"IMEX version: {args.sim_version}\n")
            return 0
        options = imex_options(args)

    async def serve() -> int:
        return await imex_daemon.ImexDaemon(options).run()

    return asyncio.run(serve())


def ctl_options(
    argv: Sequence[str], parser: argparse.ArgumentParser | None = None
) -> imex_ctlbase.CtlOptions:
    """``nvidia-imex-ctl``'s command line (without the program name) as options.

    ``parser`` is one from :func:`ctl_parser` to reuse: building one costs more than parsing
    (an in-process daemon's probes query its IMEX every second).

    Raises:
        SystemExit: a usage error (argparse's).
        imex_ctlbase.CtlError: an invalid port (status 2).
    """
    from compute_domains.sim import imex_ctlbase

    args = (parser or ctl_parser()).parse_args(list(argv))
    tcp: tuple[str, int] | None = None
    if args.tcp is not None:
        try:
            tcp = (args.tcp[0], int(args.tcp[1]))
        except ValueError:
            raise imex_ctlbase.CtlError(f"invalid port {args.tcp[1]!r}", 2) from None
    return imex_ctlbase.CtlOptions(
        action=args.action,
        config_path=args.config or DEFAULT_CONFIG,
        tcp=tcp,
        unix=args.unix,
        json=args.json,
        host_names=args.host_names,
        timeout=None if args.timeout_ms is None else args.timeout_ms / 1000.0,
    )


def main_ctl(argv: Sequence[str]) -> int:
    """Run the simulated ``nvidia-imex-ctl`` with ``argv``; its exit status."""
    from compute_domains.sim import imex_ctlbase

    try:
        options = ctl_options(argv)
    except imex_ctlbase.CtlError as failure:
        sys.stderr.write(f"{failure}\n")
        return failure.status
    if options.action == "q":
        try:
            imex_ctlbase.query(options, sys.stdout)
        except imex_ctlbase.CtlError as failure:
            sys.stderr.write(f"{failure}\n")
            return failure.status
        return 0
    import asyncio

    from compute_domains.sim import imex_ctl

    return asyncio.run(imex_ctl.run_ctl(options, sys.stdout, sys.stderr))


def main(argv: Sequence[str]) -> int:
    """Dispatch ``imex <args>`` or ``ctl <args>``; the exit status."""
    if not argv or argv[0] not in ("imex", "ctl"):
        sys.stderr.write("usage: python -m compute_domains.sim.imex_main imex|ctl [args...]\n")
        return 2
    return main_imex(argv[1:]) if argv[0] == "imex" else main_ctl(argv[1:])
