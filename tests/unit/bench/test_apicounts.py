"""The kube-apiserver's counters from its /metrics page: requests, writes, open watches."""

from __future__ import annotations

from collections import Counter

from compute_domains.bench import apicounts

_LINE = (
    'apiserver_request_total{{code="{code}",component="apiserver",group="",resource="{res}",'
    'scope="namespace",subresource="{sub}",verb="{verb}",version="v1"}} {n}'
)
METRICS = "\n".join(
    [
        "# HELP apiserver_request_total Counter of apiserver requests",
        _LINE.format(code=201, res="pods", sub="", verb="POST", n=3),
        _LINE.format(code=200, res="pods", sub="status", verb="PATCH", n=5),
        _LINE.format(code=200, res="leases", sub="", verb="PUT", n=7),
        _LINE.format(code=200, res="pods", sub="", verb="LIST", n=11),
        _LINE.format(code=409, res="pods", sub="", verb="POST", n=1),
        "other_metric 4",
    ]
)


async def test_request_counts_sum_by_verb_and_resource() -> None:
    async def fetch() -> str:
        return METRICS

    counts = await apicounts.request_counts(fetch)
    assert counts == Counter({"POST pods": 4, "PATCH pods": 5, "PUT leases": 7, "LIST pods": 11})
    assert apicounts.count_writes(counts) == 16
    assert apicounts.count_writes(counts, leases=False) == 9


def test_watch_counts_sum_open_watches_by_resource() -> None:
    text = "\n".join(
        [
            "# TYPE apiserver_longrunning_requests gauge",
            'apiserver_longrunning_requests{component="apiserver",group="",resource="pods",'
            'scope="cluster",subresource="",verb="WATCH"} 3',
            'apiserver_longrunning_requests{component="apiserver",group="",resource="pods",'
            'scope="namespace",subresource="",verb="WATCH"} 2',
            'apiserver_longrunning_requests{component="apiserver",group="",resource="nodes",'
            'scope="resource",subresource="",verb="WATCH"} 0',
            'apiserver_longrunning_requests{component="apiserver",group="",resource="pods",'
            'scope="namespace",subresource="log",verb="GET"} 4',
        ]
    )
    assert apicounts.watch_counts_of(text) == {"pods": 5}
