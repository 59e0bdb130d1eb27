"""The simulated kubelet's status manager puts its own conditions back after another writer
changed them, also when that writer's change arrives while one of its own writes is in flight
(under load the watch can deliver the other write before this write's answer): it must not
take the server's state as its own then, or the pod stays NotReady (the failure seen once in
``test_ready_is_restored_after_the_node_controller_marks_it_false`` under load)."""

from __future__ import annotations

import asyncio
import types
from typing import Any

from lightkube.models.core_v1 import PodCondition, PodSpec, PodStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from compute_domains.sim.kubelet import pods


class _Client:
    """Holds each status patch until the test lets it answer."""

    def __init__(self) -> None:
        self.writes: list[dict[str, Any]] = []
        self.release = asyncio.Event()
        self.sent = asyncio.Event()

    async def patch(self, _res: Any, _name: str, body: dict[str, Any], **_kw: Any) -> None:
        self.writes.append(body["status"])
        self.sent.set()
        await self.release.wait()
        self.release.clear()


def _pod(conditions: dict[str, str] | None = None) -> Pod:
    status = PodStatus(
        conditions=[PodCondition(type=k, status=v) for k, v in (conditions or {}).items()]
    )
    return Pod(
        metadata=ObjectMeta(name="p", namespace="ns", uid="u1"),
        spec=PodSpec(containers=[]),
        status=status,
    )


async def test_a_rewrite_during_a_write_in_flight_is_written_over() -> None:
    client = _Client()
    svc = types.SimpleNamespace(name="n1", ip="10.0.0.9", client=client)
    worker = pods.PodWorker(svc, _pod(), "10.0.0.1")  # type: ignore[arg-type]
    publisher = asyncio.create_task(worker._status.run())
    try:
        worker.changed()
        async with asyncio.timeout(1):
            await client.sent.wait()  # our first write is in flight
        ours = {c["type"]: c["status"] for c in client.writes[0]["conditions"]}
        # The node-lifecycle controller's rewrite arrives (by the watch) before our answer.
        foreign = {**ours, "Ready": "False" if ours["Ready"] == "True" else "True"}
        foreign["ContainersReady"] = foreign["Ready"]
        client.sent.clear()
        worker.update(_pod(foreign))
        client.release.set()  # now our write is answered
        async with asyncio.timeout(1):
            await client.sent.wait()  # and written again, over the other writer's conditions
        assert len(client.writes) == 2
        assert client.writes[1]["conditions"] == client.writes[0]["conditions"]
        client.release.set()
    finally:
        publisher.cancel()
        await asyncio.gather(publisher, return_exceptions=True)
