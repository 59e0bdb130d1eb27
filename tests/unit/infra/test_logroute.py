"""``infra.logroute``: records go to the log of the instance whose task logged them."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from compute_domains.infra import logroute


@pytest.fixture
def process_log() -> Iterator[io.StringIO]:
    """The process's own handler on the root logger, restored afterwards."""
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    stream = io.StringIO()
    root.handlers[:] = [logging.StreamHandler(stream)]
    root.setLevel(logging.INFO)
    logroute.install()
    yield stream
    root.handlers[:] = saved
    root.setLevel(level)


async def test_each_task_logs_to_its_own_sink_and_the_process_keeps_its_own(
    process_log: io.StringIO, tmp_path: Path
) -> None:
    log = logging.getLogger("some.component")
    sinks = [logroute.Sink(tmp_path / f"c{i}.log") for i in range(2)]
    sinks[1].configure("warning", "json")

    async def instance(sink: logroute.Sink, name: str) -> None:
        logroute.route_to(sink)
        log.info("info from %s", name)
        await asyncio.to_thread(log.warning, "warning from %s's thread", name)

    await asyncio.gather(*(asyncio.create_task(instance(s, f"c{i}")) for i, s in enumerate(sinks)))
    log.info("the process's own line")
    for sink in sinks:
        sink.close()
    first, second = ((tmp_path / f"c{i}.log").read_text() for i in range(2))
    assert "info from c0" in first and "warning from c0's thread" in first and "c1" not in first
    assert "info from c1" not in second  # below its level
    assert '"msg": "warning from c1\'s thread"' in second
    assert process_log.getvalue() == "the process's own line\n"
    assert logroute.current() is None
