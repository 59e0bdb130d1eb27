"""Which ComputeDomain drivers a formation benchmark measures, and in what order.

``cdctl bench formation`` can compare drivers in one invocation: the project's own (``ours``,
always available) and any other given as a Helm chart plus the values and image map its users
would set. This module turns the command-line words into typed ``DriverSpec``s and lays out the
alternating plan.

Option grammar (every option repeatable; ``DRIVER`` is a name given with ``--driver``):

* ``--driver ours`` or ``--driver NAME=CHART`` (a chart folder). Without any ``--driver``
  only ``ours`` runs. ``ours`` is the project's chart and takes no ``=CHART``: a second chart
  gets its own name, so a table never shows two different things under one name. A named
  driver whose chart folder is the project's own (its values compared side by side) starts
  from ``ours``'s built-in values (the sim's driver root) before its own ``--set``s.
* ``--set DRIVER:KEY=VALUE``: a ``helm --set`` value for that driver's chart only.
* ``--release DRIVER:RELEASE``, ``--namespace DRIVER:NAMESPACE``: the release's name (default
  for a named chart: the chart folder's name, as ``helm install`` of a chart is usually
  written) and namespace (default: the release name); ``ours`` has its own defaults.
* ``--image-map [DRIVER:]REPOSITORY=FOLDER``: run containers of image REPOSITORY from FOLDER in
  that driver's sims; without ``DRIVER:`` in every driver's sims (a map only matters to a chart
  whose images name that repository).

Invariant: a ``DriverOptionError`` names the option and says what was expected, so the CLI
shows it as is.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

OURS = "ours"
"""The project's own driver: always available, the denominator of every ratio."""

_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class DriverOptionError(ValueError):
    """A driver option that cannot be used; ``option`` names it (e.g. ``--set``)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DriverSpec:
    """One driver to install with helm into a fresh sim."""

    name: str
    """Short name in tables and result files (``ours``, ``nvidia``)."""
    chart: Path
    """The chart folder helm installs."""
    release: str
    """The helm release name (objects of most charts are named after it)."""
    namespace: str
    """The release namespace: the driver's controller, plugins and daemon pods live there."""
    values: tuple[str, ...] = ()
    """``helm --set`` values, in the order given."""
    image_map: tuple[tuple[str, Path], ...] = ()
    """Image repository → folder of that image's files, for this driver's sims."""

    def describe(self) -> dict[str, object]:
        """The spec as plain data, for result files."""
        return {
            "name": self.name,
            "chart": portable(self.chart),
            "release": self.release,
            "namespace": self.namespace,
            "values": list(self.values),
            "image_map": {repo: portable(folder) for repo, folder in self.image_map},
        }


def portable(folder: Path, root: Path | None = None) -> str:
    """A folder as a result file records it: relative to the checkout (``root``, default the
    working directory) when inside it, else ``<NAME folder>``, so no machine's paths are kept."""
    base = (root or Path.cwd()).resolve()
    try:
        return str(folder.resolve().relative_to(base))
    except ValueError:
        return f"<{folder.name} folder>"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Round:
    """One fresh sim with one driver, in which every size runs once."""

    index: int
    """Position in the whole invocation (0-based)."""
    repeat: int
    """Which repeat this round belongs to (0-based)."""
    driver: DriverSpec


def plan(drivers: Sequence[DriverSpec], repeats: int) -> list[Round]:
    """For each repeat, every driver once, in the order given (A B A B ...).

    Alternating (instead of all of A's repeats, then all of B's) spreads slow drift of the
    machine, such as other users' load, over every driver rather than onto the one that ran last.
    """
    order = [(r, d) for r in range(repeats) for d in drivers]
    return [Round(index=i, repeat=r, driver=d) for i, (r, d) in enumerate(order)]


def _split_driver(option: str, item: str, known: dict[str, object]) -> tuple[str, str]:
    """``DRIVER:REST`` → (DRIVER, REST), DRIVER being a declared driver."""
    name, sep, rest = item.partition(":")
    if not sep or not rest:
        raise DriverOptionError(
            option, f"{item!r}: expected DRIVER:... (DRIVER one of {_list(known)})"
        )
    if name not in known:
        raise DriverOptionError(option, f"{item!r}: no driver {name!r} (given: {_list(known)})")
    return name, rest


def _list(known: dict[str, object]) -> str:
    return ", ".join(known)


def _image_map_item(item: str, known: dict[str, object]) -> tuple[str | None, str, Path]:
    """``[DRIVER:]REPOSITORY=FOLDER`` → (DRIVER or None, REPOSITORY, FOLDER)."""
    head, sep, _ = item.partition(":")
    driver: str | None = None
    # A prefix is a driver only when it is one and its colon comes before the "=": a
    # registry with a port ("localhost:5000/x=F") is a repository, not a driver.
    if sep and head in known and item.find(":") < item.find("="):
        driver, item = _split_driver("--image-map", item, known)
    repo, _, folder = item.partition("=")
    if not repo or not folder or ":" in repo.rsplit("/", 1)[-1]:
        raise DriverOptionError(
            "--image-map", f"{item!r}: expected [DRIVER:]REPOSITORY=FOLDER (no image tag)"
        )
    path = Path(folder).resolve()
    if not path.is_dir():
        raise DriverOptionError("--image-map", f"{item!r}: {path} is not a folder")
    return driver, repo, path


def _declared(drivers: Sequence[str], ours: DriverSpec) -> dict[str, Path]:
    """Name → chart of every ``--driver`` (``ours`` alone when none is given)."""
    declared: dict[str, Path] = {}
    for item in drivers or (OURS,):
        name, sep, chart = item.partition("=")
        if not _NAME.fullmatch(name):
            raise DriverOptionError(
                "--driver", f"{item!r}: a driver name is lowercase letters, digits and '-'"
            )
        if name in declared:
            raise DriverOptionError("--driver", f"{item!r}: driver {name!r} given twice")
        if name == OURS:
            if sep:
                raise DriverOptionError(
                    "--driver",
                    f"{item!r}: 'ours' is this project's chart; give another chart its own name",
                )
            declared[name] = ours.chart
            continue
        if not sep or not chart:
            raise DriverOptionError("--driver", f"{item!r}: expected {name}=CHART (a chart folder)")
        path = Path(chart).resolve()
        if not (path / "Chart.yaml").is_file():
            raise DriverOptionError("--driver", f"{item!r}: {path} has no Chart.yaml")
        declared[name] = path
    return declared


def _single(option: str, items: Sequence[str], known: dict[str, object]) -> dict[str, str]:
    """``DRIVER:VALUE`` items where each driver may be named once."""
    out: dict[str, str] = {}
    for item in items:
        name, value = _split_driver(option, item, known)
        if name in out:
            raise DriverOptionError(option, f"{item!r}: {option} for {name!r} given twice")
        if not _DNS_LABEL.fullmatch(value):
            raise DriverOptionError(option, f"{item!r}: {value!r} is not a valid DNS label")
        out[name] = value
    return out


def _same(a: Path, b: Path) -> bool:
    """Whether two chart folders are one (resolved paths; a missing one is not the same)."""
    try:
        return a.resolve(strict=True) == b.resolve(strict=True)
    except OSError:
        return False


def parse(
    *,
    drivers: Sequence[str],
    sets: Sequence[str] = (),
    namespaces: Sequence[str] = (),
    releases: Sequence[str] = (),
    image_maps: Sequence[str] = (),
    ours: DriverSpec,
) -> tuple[DriverSpec, ...]:
    """The drivers the options describe, in ``--driver`` order; ``ours`` is the project's spec.

    Raises:
        DriverOptionError: An option is malformed or names a driver that was not given.
    """
    charts = _declared(drivers, ours)
    known: dict[str, object] = dict(charts)
    values: dict[str, list[str]] = {name: [] for name in charts}
    for item in sets:
        name, value = _split_driver("--set", item, known)
        key, eq, _ = value.partition("=")
        if not key or not eq:
            raise DriverOptionError("--set", f"{item!r}: expected DRIVER:KEY=VALUE")
        values[name].append(value)
    spaces = _single("--namespace", namespaces, known)
    names = _single("--release", releases, known)
    maps: dict[str, list[tuple[str, Path]]] = {name: [] for name in charts}
    for item in image_maps:
        driver, repo, folder = _image_map_item(item, known)
        for name in [driver] if driver else charts:
            maps[name].append((repo, folder))
    out = []
    for name, chart in charts.items():
        base = ours if name == OURS else None
        # This project's own chart under another name (to compare its values side by side)
        # still needs the sim's built-in values: without the nodes' driver root its plugins
        # find no NVML and crash-loop until helm's timeout. Given first, so a --set wins.
        inherited = ours.values if base is None and _same(chart, ours.chart) else ()
        release = names.get(name) or (base.release if base else chart.name)
        out.append(
            DriverSpec(
                name=name,
                chart=chart,
                release=release,
                namespace=spaces.get(name) or (base.namespace if base else release),
                values=(*(base.values if base else inherited), *values[name]),
                image_map=(*(base.image_map if base else ()), *maps[name]),
            )
        )
    return tuple(out)
