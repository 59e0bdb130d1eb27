"""The shared-IMEX label outside of claims: eager joining, and freeing an idle node at start."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from compute_domains.api import sharedimex
from compute_domains.plugin import configs, eager, holder
from tests.unit.plugin import fakes

CD_X, CD_A = "xxxxxxxx-0000-4000-8000-00000000000x", "aaaaaaaa-0000-4000-8000-00000000000a"
SHARED = sharedimex.SHARED_HOLDER


@pytest.fixture
def domains() -> fakes.FakeDomains:
    d = fakes.FakeDomains(
        fakes.compute_domain(CD_X, name="x", scope=sharedimex.Scope.PER_CLIQUE.value),
        fakes.compute_domain(CD_A, name="a"),
    )
    d.ready = {CD_A}
    return d


def _claim(uid: str, cd: str, slot: int = 0) -> configs.Claim:
    return fakes.claim(
        uid, [fakes.result(f"channel-{slot}")], [fakes.config_entry(fakes.channel_config(cd))]
    )


class _Node:
    """A node's DeviceState with its eager task poked on every holder change, as in ``app``."""

    def __init__(self, root: Path, domains: fakes.FakeDomains, *, on: bool, clique: str) -> None:
        self.shared = fakes.FakeShared(domains)
        self.changed = asyncio.Event()
        self.state = fakes.device_state(
            root,
            domains,
            shared=self.shared,
            clique_id=clique,
            on_holder_change=self._changed,
        )
        self.joiner = eager.SharedLabel(
            device_state=self.state,
            shared_imex=self.shared,
            eager=on,
            clique_id=clique,
            node=fakes.NODE,
        )

    def _changed(self, _holder: str) -> None:
        self.changed.set()
        if hasattr(self, "joiner"):
            self.joiner.poke()

    async def holder_becomes(self, want: str) -> None:
        async with asyncio.timeout(2):
            while self.state.holder != want:
                await self.changed.wait()
                self.changed.clear()


def _node(root: Path, domains: fakes.FakeDomains, *, on: bool, clique: str = fakes.CLIQUE) -> _Node:
    return _Node(root, domains, on=on, clique=clique)


async def test_eager_labels_a_free_node_at_start(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    node = _node(tmp_path, domains, on=True)
    task = asyncio.create_task(node.joiner.run())
    await node.holder_becomes(SHARED)
    assert node.shared.label
    assert not task.done(), "it idles until cancelled"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_eager_waits_for_the_last_claim_of_a_per_domain_cd(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    node = _node(tmp_path, domains, on=True)
    await node.state.prepare(_claim("a1", CD_A), wait_s=1)
    await node.state.prepare(_claim("a2", CD_A, slot=1), wait_s=1)
    assert not await node.joiner.try_join()
    assert not node.shared.label and node.state.holder == CD_A
    task = asyncio.create_task(node.joiner.run())
    await node.state.unprepare("a1")
    await node.state.unprepare("a2")
    await node.holder_becomes(SHARED)
    assert node.shared.label
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_eager_does_nothing_on_a_node_without_a_clique_id(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    node = _node(tmp_path, domains, on=True, clique="")
    assert not node.joiner.eager
    node.shared.label = True
    await node.joiner.at_start()
    assert node.shared.label, "eager asked: nothing removed either"


async def test_not_eager_frees_an_idle_node_at_start(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    node = _node(tmp_path, domains, on=False)
    node.shared.label = True
    node.state.set_node_labels(holder.NodeLabels(shared_imex=True))
    await node.joiner.at_start()
    assert not node.shared.label and node.state.holder == ""


async def test_not_eager_keeps_the_label_while_a_per_clique_claim_is_live(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    node = _node(tmp_path, domains, on=False)
    await node.state.prepare(_claim("x1", CD_X), wait_s=1)
    await node.joiner.at_start()
    assert node.shared.label and node.state.holder == SHARED
    await node.state.unprepare("x1")
    await node.joiner.at_start()  # the next start, now idle
    assert not node.shared.label


async def test_eager_at_start_removes_nothing(tmp_path: Path, domains: fakes.FakeDomains) -> None:
    node = _node(tmp_path, domains, on=True)
    node.shared.label = True
    await node.joiner.at_start()
    assert node.shared.label
