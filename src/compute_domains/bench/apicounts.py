"""The kube-apiserver's own counters, read from its ``/metrics`` page for the bench.

``request_counts`` and ``failure_counts`` read ``apiserver_request_total`` (by verb and
resource; the refused ones by code too), ``watch_counts`` the open watches
(``apiserver_longrunning_requests`` with verb WATCH, by resource); ``count_writes`` sums the
write verbs (``WRITE_VERBS``) in a difference of two request counts. The page is fetched by
the caller's ``MetricsFetch`` (``bench.rounds`` runs ``kubectl get --raw /metrics``); all else
here is text parsing and counting.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")


MetricsFetch = Callable[[], Awaitable[str]]


def _request_lines(text: str) -> list[tuple[dict[str, str], int]]:
    """The labels and count of every ``apiserver_request_total`` sample in a ``/metrics`` text."""
    out = []
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_part, value = line.rsplit(" ", 1)
        labels = dict(
            kv.split("=", 1)
            for kv in labels_part[len("apiserver_request_total{") : -1].replace('"', "").split(",")
        )
        out.append((labels, int(float(value))))
    return out


def watch_counts_of(text: str) -> Counter[str]:
    """resource → watches open now, from ``apiserver_longrunning_requests{verb="WATCH"}``
    (a gauge the kube-apiserver keeps per group, resource, scope and subresource)."""
    counts: Counter[str] = Counter()
    prefix = "apiserver_longrunning_requests{"
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        labels_part, value = line.rsplit(" ", 1)
        labels = dict(
            kv.split("=", 1) for kv in labels_part[len(prefix) : -1].replace('"', "").split(",")
        )
        if labels.get("verb") == "WATCH" and float(value) > 0:
            counts[labels.get("resource", "?")] += int(float(value))
    return counts


async def watch_counts(fetch: MetricsFetch) -> Counter[str]:
    """resource → watches open now (``watch_counts_of`` on the API server's ``/metrics``)."""
    return watch_counts_of(await fetch())


async def request_counts(fetch: MetricsFetch) -> Counter[str]:
    """``verb resource`` → count, from the API server's ``/metrics`` text."""
    counts: Counter[str] = Counter()
    for labels, value in _request_lines(await fetch()):
        counts[f"{labels.get('verb', '?')} {labels.get('resource', '?')}"] += value
    return counts


async def failure_counts(fetch: MetricsFetch) -> Counter[str]:
    """``verb resource code`` → count of the requests the API server refused (code >= 400):
    409 Conflict (a lost optimistic-concurrency race), 422 (a failed JSON-patch test), etc."""
    counts: Counter[str] = Counter()
    for labels, value in _request_lines(await fetch()):
        code = labels.get("code", "")
        if code.isdigit() and int(code) >= 400:
            counts[f"{labels.get('verb', '?')} {labels.get('resource', '?')} {code}"] += value
    return counts


def count_writes(delta: Counter[str], *, leases: bool = True) -> int:
    """Write requests in ``delta``; ``leases=False`` leaves out Lease renewals, the heartbeat of
    every node and leader that runs whether or not anything forms."""
    return sum(
        v
        for k, v in delta.items()
        if k.split(" ", 1)[0] in WRITE_VERBS and (leases or not k.endswith(" leases"))
    )
