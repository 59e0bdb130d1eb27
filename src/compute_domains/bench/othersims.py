"""Other simulators running beside a benchmark: named, so no number is read as quiet when it
was not.

A benchmark's sims share the machine's cores with every other sim of the same home (a sim left
behind by ``--keep``, a test's, a demo's): their kubelets, daemons and IMEX stand-ins run on.
:func:`others` names the ones whose supervisor is alive; the benchmark prints a warning before
its first round and records the names in its result file (``other_sims``).
"""

from __future__ import annotations

from pathlib import Path

from compute_domains.sim import lifecycle, state


def others(home: Path, *, own: str) -> list[str]:
    """Names of the sims under ``home`` whose supervisor runs, other than ``own``."""
    found = []
    for paths in lifecycle.list_sims(home):
        if paths.name == own:
            continue
        recorded = state.read_state(paths)
        if recorded is not None and state.supervisor_alive(paths, recorded):
            found.append(paths.name)
    return found


def warning(names: list[str], home: Path) -> str:
    """The line a benchmark prints when ``names`` run beside it."""
    stops = "; ".join(f"cdctl sim down --name {n}" for n in names)
    return (
        f"warning: {len(names)} other sim(s) running under {home}: {', '.join(names)}; their "
        f"processes share the cores with this benchmark and slow what it measures (stop them: "
        f"{stops})"
    )
