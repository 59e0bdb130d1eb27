"""The IMEX readiness signal's rule: when a serving pod's annotation says its IMEX runs now."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest
from lightkube.models.core_v1 import (
    Container,
    ContainerState,
    ContainerStateRunning,
    ContainerStateTerminated,
    ContainerStatus,
    PodSpec,
    PodStatus,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from compute_domains.api import imexsignal, names

pytestmark = pytest.mark.timeout(2)
UID = "0b7c3f6e-1111-2222-3333-444455556666"
NODE = "gb200-r0-n01"
NS = "nvidia-dra-driver-gpu"
START = datetime.datetime(2026, 12, 6, 12, 0, 5, tzinfo=datetime.UTC)
"""The container's current run, as the API shows it (to the second)."""


@dataclasses.dataclass
class Shape:
    signal_at: datetime.datetime | None = START + datetime.timedelta(seconds=2.5)
    label: str | None = UID
    running: bool = True
    terminating: bool = False
    node: str = NODE
    namespace: str = NS
    command: str = "cdctl"
    declared: bool = True


def _pod(shape: Shape) -> Pod:
    annotations = dict(imexsignal.DECLARED) if shape.declared else {}
    if shape.signal_at is not None:
        annotations[imexsignal.key(UID)] = imexsignal.encode(shape.signal_at, "abc")
    state = (
        ContainerState(running=ContainerStateRunning(startedAt=START))
        if shape.running
        else ContainerState(terminated=ContainerStateTerminated(exitCode=137))
    )
    return Pod(
        metadata=ObjectMeta(
            name="agent-x",
            namespace=shape.namespace,
            labels={names.COMPUTE_DOMAIN_LABEL: shape.label} if shape.label else {},
            annotations=annotations,
            deletionTimestamp=START if shape.terminating else None,
        ),
        spec=PodSpec(
            nodeName=shape.node, containers=[Container(name="a", command=[shape.command])]
        ),
        status=PodStatus(
            containerStatuses=[
                ContainerStatus(
                    name="a", image="i", imageID="", ready=True, restartCount=1, state=state
                )
            ]
        ),
    )


def _judge(pod: Any) -> str:
    return imexsignal.judge(pod, domain_uid=UID, node=NODE, namespace=NS)


@pytest.mark.parametrize(
    ("shape", "counts", "words"),
    [
        (Shape(), True, ""),
        # Written by this run a full second after its start second: counts.
        (Shape(signal_at=START + datetime.timedelta(seconds=1)), True, ""),
        # Within the start's second, or before it: a previous process may have written it.
        (Shape(signal_at=START + datetime.timedelta(seconds=0.9)), False, "previous process"),
        (Shape(signal_at=START - datetime.timedelta(seconds=3)), False, "previous process"),
        (Shape(signal_at=None), False, "has not signalled"),
        (Shape(running=False), False, "not running"),
        (Shape(terminating=True), False, "terminating"),
        (Shape(label="another-cd"), False, "does not serve"),
        (Shape(label=None), False, "does not serve"),
        (Shape(node="gb200-r0-n02"), False, "does not serve"),
        (Shape(namespace="default"), False, "does not serve"),
        (Shape(command=imexsignal.NVIDIA_DAEMON_PROGRAM), False, "does not serve"),
        # A daemon pod of an older version (its DaemonSet is never updated) writes none.
        (Shape(declared=False), False, "does not serve"),
    ],
)
def test_a_signal_counts_only_from_the_running_process_of_a_pod_serving_the_cd(
    shape: Shape, counts: bool, words: str
) -> None:
    verdict = _judge(_pod(shape))
    assert (verdict == "") is counts, verdict
    assert words in verdict


def test_the_value_round_trips_and_junk_is_no_signal() -> None:
    at = datetime.datetime(2026, 12, 6, 12, 0, 7, 123456, tzinfo=datetime.UTC)
    assert imexsignal.decode(imexsignal.encode(at, "i1")) == imexsignal.Signal(at=at, imex="i1")
    for junk in (
        None,
        "",
        "Ready",
        "{}",
        '{"at": "yesterday", "imex": "x"}',
        '{"at": "2026-12-06T12:00:00", "imex": "x"}',
    ):
        assert imexsignal.decode(junk) is None, junk


@pytest.mark.parametrize(
    ("started", "earliest"), [(100.0, 101.0), (100.2, 101.0), (100.999, 101.0)]
)
def test_a_writer_stamps_no_earlier_than_a_second_past_its_start_second(
    started: float, earliest: float
) -> None:
    assert imexsignal.not_before(started) == earliest
