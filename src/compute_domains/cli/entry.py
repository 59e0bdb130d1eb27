"""The ``cdctl`` process entry: the daemon's commands first, everything else after.

``cdctl daemon check`` may run as an exec probe every second on every node of a domain (our
DaemonSet probes the daemon's ``/readyz`` instead; an exec probe is what NVIDIA's chart renders
and what an operator types). Going
through click and the rest of the CLI costs about a quarter of a CPU-second per run; this entry
looks at ``argv`` before importing anything beyond the standard library and runs
:mod:`compute_domains.daemon.probe`. It takes the flags (and ``CLIQUE_ID``) that ``daemon run``
shares with it and ignores the others, so both commands can be given the same arguments. This is
the only implementation of the command, ``--help`` included; click never sees it.

``cdctl daemon run`` starts on every node of a forming domain; it too is dispatched here
without click (``cli.daemonopts`` parses its flags, defined once for click and for this path),
except for ``--help`` and command lines click must answer (see :func:`daemon_run`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path


def daemon_check(argv: Sequence[str]) -> int:
    """``cdctl daemon check [flags]`` without click; the exit status."""
    import argparse

    from compute_domains.daemon import probe

    parser = argparse.ArgumentParser(
        prog="cdctl daemon check",
        description="Probe: pass when the local IMEX daemon answers READY (always without a "
        "clique ID). Flags it does not know (those of `daemon run`) are ignored.",
    )
    parser.add_argument(
        "--cliqueid",
        "--clique-id",
        dest="clique_id",
        default=os.environ.get("CLIQUE_ID", ""),
        help="Clique ID <clusterUUID>.<clique> of the node; empty without MNNVL. Env CLIQUE_ID.",
    )
    parser.add_argument(
        "--imex-config",
        type=Path,
        default=Path("/imexd/imexd.cfg"),
        help="IMEX daemon config the ctl tool reads (default: %(default)s).",
    )
    parser.add_argument(
        "--imex-ctl", default="nvidia-imex-ctl", help="IMEX ctl tool (default: %(default)s)."
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=8.0,
        help="Seconds to wait for the ctl tool; the probes allow 10 (default: %(default)s).",
    )
    args, _ = parser.parse_known_args(list(argv))  # the logging flags of `daemon run` pass
    result = probe.run(
        probe.CheckSettings(
            clique_id=args.clique_id,
            config_path=args.imex_config,
            ctl_command=args.imex_ctl,
            timeout=args.timeout,
        )
    )
    print(result.message, file=sys.stdout if result.ok else sys.stderr)
    return 0 if result.ok else 1


def daemon_run(argv: Sequence[str]) -> int | None:
    """``cdctl daemon run [flags]`` without click; None when click must answer instead.

    ``cli.daemonopts.parse`` reads the command's flags and environment exactly as click would;
    ``--help``, a flag it does not know or a value click would refuse go to click, which answers
    as it always did. Errors of the run itself are printed as ``cli.main`` prints them.
    """
    from compute_domains.cli import daemonopts

    opts = daemonopts.parse(argv)
    if opts is None:
        return None
    # The daemon's API client speaks HTTP/1.1 (lightkube's default, http2=False), but its
    # transport imports the HTTP/2 stack whenever it is installed (lightkube installs it): about
    # 30 ms of CPU per daemon start for code this process never runs. A None entry makes that
    # optional import fail as if h2 were absent (the transport then refuses HTTP/2 outright).
    sys.modules.setdefault("h2", None)  # type: ignore[arg-type]  # None: "not importable"
    from compute_domains.cli import daemon
    from compute_domains.infra import errors

    try:
        daemon.run(opts)
    except errors.ComputeDomainsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


def main() -> None:
    """Console-script entry of ``cdctl``."""
    args = sys.argv[1:]
    if args[:2] == ["daemon", "check"]:
        sys.exit(daemon_check(args[2:]))
    if args[:2] == ["daemon", "run"] and (status := daemon_run(args[2:])) is not None:
        sys.exit(status)
    from compute_domains.cli import main as full

    full.main()
