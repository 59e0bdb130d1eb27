"""Leaving the clique at shutdown: the entry goes, and the log says so in NVIDIA's words too.

NVIDIA's test "daemon shutdown: confirm CD status cleanup" follows the daemon's log and greps a
line for ``Successfully removed daemon`` and ``from ComputeDomain <namespace>/<name>``.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, cast

import pytest
from lightkube import AsyncClient

from compute_domains.api.clique import CliqueDaemon, ComputeDomainClique
from compute_domains.daemon import events, membership
from compute_domains.daemon.config import Identity
from compute_domains.infra import backoff

CLIQUE_ID = "5b1c0d6e-0000-4000-8000-000000000001.7"
ME = Identity(
    node_name="n1",
    pod_name="daemon-n1",
    pod_namespace="driver",
    pod_uid="uid-daemon-n1",
    pod_ip="10.0.0.1",
    clique_id=CLIQUE_ID,
    domain_uid="cd-uid",
    domain_name="imex-channel-injection",
    domain_namespace="default",
)


class _Clique:
    """One clique object: ``get`` returns it, ``patch`` applies our removal (tests checked)."""

    def __init__(self, clique: ComputeDomainClique) -> None:
        self.stored = clique.to_resource()
        self.patches: list[Any] = []

    async def get(self, _kind: object, _name: str, *, namespace: str) -> Any:
        return self.stored

    async def patch(self, _kind: object, _name: str, ops: Any, **_kw: Any) -> Any:
        self.patches.append(ops)
        doc = ComputeDomainClique.from_resource(self.stored).to_dict()
        (removed,) = [o for o in ops if o["op"] == "remove"]
        position = int(removed["path"].rsplit("/", 1)[1])
        for test in (o for o in ops if o["op"] == "test"):
            assert doc["daemons"][position][test["path"].rsplit("/", 1)[1]] == test["value"]
        del doc["daemons"][position]
        self.stored = ComputeDomainClique.from_dict(doc).to_resource()
        return self.stored


async def test_stopping_removes_our_entry_and_logs_it_in_nvidias_words(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clique = ComputeDomainClique.new(domain_uid="cd-uid", clique_id=CLIQUE_ID, namespace="driver")
    entries = (
        CliqueDaemon(node_name="n1", ip_address="10.0.0.1", clique_id=CLIQUE_ID, index=0),
        CliqueDaemon(node_name="n2", ip_address="10.0.0.2", clique_id=CLIQUE_ID, index=1),
    )
    api = _Clique(dataclasses.replace(clique, daemons=entries))
    client = cast(AsyncClient, api)
    member = membership.Membership(
        client,
        ME,
        max_nodes=18,
        retry=backoff.Backoff(initial=0.01, maximum=0.01, jitter=0.0),
        recorder=events.PodEvents(client, ME),
        on_peers=lambda _m: None,
    )
    with caplog.at_level(logging.INFO, logger=membership.__name__):
        await member._deregister_bounded()  # what run() does when it is cancelled
    left = ComputeDomainClique.from_resource(api.stored)
    assert [d.node_name for d in left.daemons] == ["n2"]
    lines = [
        r.getMessage() for r in caplog.records if "Successfully removed daemon" in r.getMessage()
    ]
    assert len(lines) == 1, caplog.text
    assert "from ComputeDomain default/imex-channel-injection" in lines[0]
    assert clique.name in lines[0] and "10.0.0.1" in lines[0]
