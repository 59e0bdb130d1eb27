"""A container the power cut ended counts as restarted, like a kubelet shows it after a reboot."""

from __future__ import annotations

from typing import Any

from lightkube.models.core_v1 import (
    ContainerState,
    ContainerStateRunning,
    ContainerStatus,
)

from compute_domains.sim.kubelet import podstatus


def _before(restarts: int, cid: str | None) -> ContainerStatus:
    return ContainerStatus(
        name="c",
        image="debian:12",
        imageID="",
        ready=True,
        restartCount=restarts,
        containerID=cid,
        state=ContainerState(running=ContainerStateRunning(startedAt="2026-11-30T01:00:00Z")),
    )


def test_a_container_that_ran_before_the_boot_counts_one_more_restart() -> None:
    rec = podstatus.ContainerRecord(name="c", image="debian:12")
    podstatus.after_reboot(rec, _before(2, "sim://u_c-2"))
    wire = rec.wire()
    assert wire["restartCount"] == 3
    last = wire["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"], last["containerID"]) == (
        255,
        "Unknown",
        "sim://u_c-2",
    )
    assert last["startedAt"] == "2026-11-30T01:00:00Z"


def test_a_container_never_created_starts_its_history_fresh() -> None:
    for previous in (None, _before(0, None)):
        rec = podstatus.ContainerRecord(name="c", image="debian:12")
        podstatus.after_reboot(rec, previous)
        assert rec.wire()["restartCount"] == 0
        assert rec.wire()["lastState"] == {}


def _running() -> list[podstatus.ContainerRecord]:
    rec = podstatus.ContainerRecord(name="c", image="debian:12")
    rec.state, rec.started_at = "running", "2026-12-06T12:00:00Z"
    rec.ready = rec.started = True
    return [rec]


def _build(records: list[podstatus.ContainerRecord], since: dict[str, str]) -> dict[str, Any]:
    return podstatus.build(
        records,
        sandbox_ready=True,
        pod_ip="127.64.0.2",
        host_ip="127.1.0.2",
        start_time="2026-12-06T12:00:00Z",
        since=since,
    )


def test_the_first_status_remembers_when_each_condition_took_its_status() -> None:
    # Before: an empty ``since`` was never filled, so every later build stamped every condition
    # anew and each rewrite of an unchanged status was a new object version for every watcher.
    since: dict[str, str] = {}
    status = _build(_running(), since)
    stamps = {c["type"]: c["lastTransitionTime"] for c in status["conditions"]}
    assert (
        set(since)
        == set(stamps)
        == {
            "PodReadyToStartContainers",
            "Initialized",
            "ContainersReady",
            "Ready",
        }
    )
    assert all(since[kind] == f"True@{stamp}" for kind, stamp in stamps.items())


def test_an_unchanged_condition_keeps_its_stamp_and_a_change_gets_a_new_one() -> None:
    old = "2026-01-01T00:00:00Z"
    since = {"Ready": f"True@{old}", "ContainersReady": f"True@{old}"}
    assert podstatus.transition(since, "Ready", "True") == old
    assert _build(_running(), since) == _build(_running(), since)
    assert since["ContainersReady"] == f"True@{old}"
    flipped = podstatus.transition(since, "Ready", "False")
    assert flipped != old
    assert since["Ready"] == f"False@{flipped}"
