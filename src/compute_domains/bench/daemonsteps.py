"""The daemons' own start-up steps, read from their logs after a formation.

Each of our daemons logs one line per start-up step with the fields ``step``, ``since_start_s``
(seconds since its process started) and ``since_prev_s`` (since its previous step), in text
(``... step=registered since_start_s=3.214 since_prev_s=1.02``) or JSON lines. The benchmark
reads every daemon pod's log of the domain through the API once the domain formed (after the
formation's request count, so it is not formation work) and summarises each step over the
daemons: when it was done (median and max of ``since_start_s``) and how long it took (median and
max of ``since_prev_s``). The benchmark may not import the daemon (import contract), so this
module knows the lines by their text. A driver whose daemons log no such line (NVIDIA's) has no
steps; that is not an error.
"""

from __future__ import annotations

import functools
import json
import re
import statistics
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.api import names
from compute_domains.bench import bounded

ORDER = (
    "settings_loaded",
    "pod_labelled",
    "registered",
    "imex_started",
    "imex_ready",
    "pod_ready",
    "ready_reported",
)
"""Our daemon's steps in the order it does them (``daemon.steps.ORDER``, by text)."""

_TEXT = re.compile(
    r"\bstep=(?P<step>\w+) since_start_s=(?P<since>[\d.]+) since_prev_s=(?P<prev>[\d.]+)"
)

Timings = dict[str, tuple[float, float]]
"""Step → (seconds since the process start, seconds since the previous step)."""


def parse(text: str) -> Timings:
    """The steps one daemon's log reports (the first report of each step counts)."""
    found: Timings = {}
    for line in text.splitlines():
        got = _from_json(line) if line.startswith("{") else _from_text(line)
        if got is not None and got[0] not in found:
            found[got[0]] = got[1]
    return found


def _from_text(line: str) -> tuple[str, tuple[float, float]] | None:
    m = _TEXT.search(line)
    if m is None:
        return None
    return m.group("step"), (float(m.group("since")), float(m.group("prev")))


def _from_json(line: str) -> tuple[str, tuple[float, float]] | None:
    try:
        doc = json.loads(line)
        return str(doc["step"]), (float(doc["since_start_s"]), float(doc["since_prev_s"]))
    except (ValueError, KeyError, TypeError):
        return None


def summarize(daemons: list[Timings]) -> dict[str, dict[str, float]]:
    """Per step, over the daemons that reported it: ``at_median``/``at_max`` (since the process
    start), ``took_median``/``took_max`` (since the previous step) and ``daemons`` (how many)."""
    steps = [s for s in ORDER if any(s in d for d in daemons)]
    steps += sorted({s for d in daemons for s in d} - set(ORDER))
    out: dict[str, dict[str, float]] = {}
    for step in steps:
        at = [d[step][0] for d in daemons if step in d]
        took = [d[step][1] for d in daemons if step in d]
        out[step] = {
            "at_median": round(statistics.median(at), 3),
            "at_max": round(max(at), 3),
            "took_median": round(statistics.median(took), 3),
            "took_max": round(max(took), 3),
            "daemons": len(at),
        }
    return out


async def _log(client: AsyncClient, pod: str, *, ns: str) -> str:
    try:
        return "".join([line async for line in client.log(pod, namespace=ns)])
    except httpx.HTTPError:
        # A pod whose log could not be read (no answer at all included: at 4,608 virtual
        # nodes the machine ran out of ports for new connections, issue 28) reports no steps;
        # each step's ``daemons`` says how many did.
        return ""


async def collect(
    client: AsyncClient, *, driver_ns: str, uid: str, limit: int = 64, timeout: float = 60
) -> dict[str, Any]:
    """The summary (``summarize``) of the steps of every daemon pod of the domain ``uid`` whose
    log was read within ``timeout`` seconds, ``limit`` at a time (``bench.bounded``)."""
    listed = client.list(Pod, namespace=driver_ns, labels={names.COMPUTE_DOMAIN_LABEL: uid})
    pods = [str(p.metadata.name) async for p in listed if p.metadata]
    logs = await bounded.gather(
        functools.partial(_log, client, ns=driver_ns), pods, limit=limit, timeout=timeout
    )
    # A log not read in time reports no steps (each step's ``daemons`` says how many did).
    return summarize([parse(text) for text in logs if text is not None])
