"""The ``cdctl`` process entry: the daemon's exec probe first, everything else after.

``cdctl daemon check`` runs as an exec probe every second on every node of a domain. Going
through click and the rest of the CLI costs about a quarter of a CPU-second per run; this entry
looks at ``argv`` before importing anything beyond the standard library and runs
:mod:`compute_domains.daemon.probe` with the same flags (and ``CLIQUE_ID``) as the full command.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def daemon_check(argv: Sequence[str]) -> int:
    """``cdctl daemon check [flags]`` without click; the exit status."""
    from compute_domains.daemon import probe

    parser = argparse.ArgumentParser(prog="cdctl daemon check")
    parser.add_argument(
        "--cliqueid", "--clique-id", dest="clique_id", default=os.environ.get("CLIQUE_ID", "")
    )
    parser.add_argument("--imex-config", type=Path, default=Path("/imexd/imexd.cfg"))
    parser.add_argument("--imex-ctl", default="nvidia-imex-ctl")
    parser.add_argument("--timeout", type=float, default=8.0)
    args, _ = parser.parse_known_args(list(argv))  # logging flags of the full command pass
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


def main() -> None:
    """Console-script entry of ``cdctl``."""
    args = sys.argv[1:]
    if args[:2] == ["daemon", "check"] and not {"-h", "--help"} & set(args):
        sys.exit(daemon_check(args[2:]))
    from compute_domains.cli import main as full

    full.main()
