"""A container the power cut ended counts as restarted, like a kubelet shows it after a reboot."""

from __future__ import annotations

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
