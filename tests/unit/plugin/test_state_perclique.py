"""DeviceState in issue 26's per-clique scope: channel, Node marks, scope refusals, restart."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from compute_domains.api import names, sharedimex
from compute_domains.infra import errors
from compute_domains.plugin import cdi, checkpoint, computedomain, configs, holder
from compute_domains.plugin import state as st
from tests.unit.plugin import fakes

CD_X, CD_Y = "xxxxxxxx-0000-4000-8000-00000000000x", "yyyyyyyy-0000-4000-8000-00000000000y"
CD_A = "aaaaaaaa-0000-4000-8000-00000000000a"
PER_CLIQUE = sharedimex.Scope.PER_CLIQUE.value
State = checkpoint.ClaimState
SHARED_DIR = f"/var/lib/kubelet/plugins/{names.DRIVER_NAME}/domains/shared-imex"


def _claim(uid: str, cd: str, slot: int = 0, mode: str = "Single", **kw: Any) -> configs.Claim:
    return fakes.claim(
        uid,
        [fakes.result(f"channel-{slot}")],
        [fakes.config_entry(fakes.channel_config(cd, mode))],
        **kw,
    )


def _spec(root: Path, uid: str) -> dict[str, Any]:
    edits = json.loads((root / "var/run/cdi" / cdi.claim_spec_file_name(uid)).read_text())
    return edits["devices"][0]["containerEdits"]  # type: ignore[no-any-return]


def _channels(root: Path, uid: str) -> list[str]:
    return [n["path"] for n in _spec(root, uid)["deviceNodes"]]


async def _entry(s: st.DeviceState, uid: str) -> checkpoint.ClaimEntry | None:
    async with s.transaction() as txn:
        return txn.current.get(uid)


@pytest.fixture
def domains() -> fakes.FakeDomains:
    d = fakes.FakeDomains(
        fakes.compute_domain(CD_X, name="x", scope=PER_CLIQUE),
        fakes.compute_domain(CD_Y, name="y", scope=PER_CLIQUE),
        fakes.compute_domain(CD_A, name="a"),
    )
    d.ready = {CD_A}
    return d


@pytest.fixture
def shared(domains: fakes.FakeDomains) -> fakes.FakeShared:
    return fakes.FakeShared(domains)


async def test_a_per_clique_claim_gets_its_cds_channel_and_marks_the_node(
    tmp_path: Path, domains: fakes.FakeDomains, shared: fakes.FakeShared
) -> None:
    holders: list[str] = []
    s = fakes.device_state(tmp_path, domains, shared=shared, holders=holders)
    await s.prepare(_claim("c1", CD_X, slot=3), wait_s=1)
    assert shared.cliques == [fakes.CLIQUE]
    assert shared.node_annotations == {sharedimex.channel_key(CD_X): "1"}
    assert shared.label and domains.node_label == "", "no CD label for a per-clique CD"
    assert s.holder == sharedimex.SHARED_HOLDER and holders[-1] == sharedimex.SHARED_HOLDER
    assert _channels(tmp_path, "c1") == ["/dev/nvidia-caps-imex-channels/channel1"]
    edits = _spec(tmp_path, "c1")
    (mount,) = edits["mounts"]
    assert (mount["hostPath"], mount["containerPath"]) == (SHARED_DIR, "/imexd")
    assert mount["options"][0] == "ro"
    assert (tmp_path / SHARED_DIR.lstrip("/")).is_dir(), "the folder to mount exists"
    assert not s.domain_dir(CD_X).exists(), "no per-CD folder"
    assert f"COMPUTE_DOMAIN_UUID={CD_X}" in edits["env"]
    entry = await _entry(s, "c1")
    assert entry is not None and entry.state is State.PREPARE_COMPLETED
    assert entry.scope is sharedimex.Scope.PER_CLIQUE


async def test_a_per_clique_prepare_follows_the_clique_from_its_allocation_to_its_wait(
    tmp_path: Path, domains: fakes.FakeDomains, shared: fakes.FakeShared
) -> None:
    """The registry and agent-pod followers open before the channel is allocated (their reads
    overlap the prepare's writes, and the allocation and the wait read from them), and close
    when the prepare ends, also when it fails; a per-domain prepare opens none."""
    s = fakes.device_state(tmp_path, domains, shared=shared)
    await s.prepare(_claim("x1", CD_X), wait_s=1)
    assert shared.followed == [fakes.CLIQUE]
    assert shared.allocated_while_following == [True]
    assert shared.waited_while_following == [True]
    assert shared.open_followers == 0, "closed once the prepare returned"
    shared.ready = False
    with pytest.raises(errors.TemporaryError, match="not Ready yet"):
        await s.prepare(_claim("y1", CD_Y, slot=1), wait_s=0.1)
    assert shared.followed == [fakes.CLIQUE] * 2 and shared.open_followers == 0
    unused = fakes.FakeShared(domains)
    other = fakes.device_state(tmp_path / "other", domains, shared=unused)
    await other.prepare(_claim("a1", CD_A), wait_s=1)
    assert not unused.followed, "a per-domain claim follows no shared registry"


async def test_two_per_clique_cds_share_a_node_each_seeing_only_its_own_channel(
    tmp_path: Path, domains: fakes.FakeDomains, shared: fakes.FakeShared
) -> None:
    s = fakes.device_state(tmp_path, domains, shared=shared)
    await s.prepare(_claim("x1", CD_X, slot=0), wait_s=1)
    await s.prepare(_claim("y1", CD_Y, slot=1), wait_s=1)
    await s.prepare(_claim("x2", CD_X, slot=2), wait_s=1)
    assert _channels(tmp_path, "x1") == ["/dev/nvidia-caps-imex-channels/channel1"]
    assert _channels(tmp_path, "x2") == ["/dev/nvidia-caps-imex-channels/channel1"]
    assert _channels(tmp_path, "y1") == ["/dev/nvidia-caps-imex-channels/channel2"]
    assert sharedimex.channels(shared.node_annotations) == {CD_X: 1, CD_Y: 2}


async def test_the_last_claim_of_a_cd_removes_its_annotation_and_the_label_stays(
    tmp_path: Path, domains: fakes.FakeDomains, shared: fakes.FakeShared
) -> None:
    s = fakes.device_state(tmp_path, domains, shared=shared)
    await s.prepare(_claim("x1", CD_X, slot=0), wait_s=1)
    await s.prepare(_claim("x2", CD_X, slot=1), wait_s=1)
    await s.prepare(_claim("y1", CD_Y, slot=2), wait_s=1)
    await s.unprepare("x1")
    assert sharedimex.channels(shared.node_annotations) == {CD_X: 1, CD_Y: 2}
    await s.unprepare("x2")
    assert sharedimex.channels(shared.node_annotations) == {CD_Y: 2}
    await s.unprepare("y1")
    assert shared.node_annotations == {}
    assert shared.label, "a detach never stops the shared IMEX"
    assert s.holder == sharedimex.SHARED_HOLDER, "the node stays in the per-clique scope"
    assert shared.registry == {
        sharedimex.channel_key(CD_X): "1",
        sharedimex.channel_key(CD_Y): "2",
    }, "the numbers are the controller's to release"


async def test_a_per_domain_claim_is_refused_on_a_per_clique_node_even_after_its_claims(
    tmp_path: Path, domains: fakes.FakeDomains, shared: fakes.FakeShared
) -> None:
    s = fakes.device_state(tmp_path, domains, shared=shared)
    await s.prepare(_claim("x1", CD_X), wait_s=1)
    with pytest.raises(
        computedomain.NodeHeldError, match=r"perClique scope .*per-clique claims x1"
    ):
        await s.prepare(_claim("a1", CD_A, slot=1), wait_s=1)
    assert await _entry(s, "a1") is None and domains.node_label == ""
    await s.unprepare("x1")
    with pytest.raises(computedomain.NodeHeldError, match="node label compute-domains/shared-imex"):
        await s.prepare(_claim("a1", CD_A, slot=1), wait_s=1)


async def test_a_per_clique_claim_is_refused_on_a_node_a_per_domain_cd_holds(
    tmp_path: Path, domains: fakes.FakeDomains, shared: fakes.FakeShared
) -> None:
    s = fakes.device_state(tmp_path, domains, shared=shared)
    await s.prepare(_claim("a1", CD_A), wait_s=1)
    with pytest.raises(
        computedomain.NodeHeldError, match=f"{CD_A}, scope perDomain.*{CD_X} .scope perClique."
    ):
        await s.prepare(_claim("x1", CD_X, slot=1), wait_s=1)
    assert await _entry(s, "x1") is None
    assert shared.registry == {} and not shared.label, "nothing allocated, nothing marked"
    assert s.holder == CD_A


@pytest.mark.parametrize(
    ("clique_id", "mode", "message"),
    [
        ("", "Single", "per-clique scope needs multi-node NVLink: node has no clique ID"),
        (
            fakes.CLIQUE,
            "All",
            "all 2048 channels would let the pod import every other ComputeDomain's memory on "
            "the clique's shared IMEX domain; use allocationMode Single, or the perDomain scope",
        ),
    ],
    ids=["no-clique-id", "all-mode"],
)
async def test_what_the_per_clique_scope_cannot_do_is_refused_for_good(
    tmp_path: Path,
    domains: fakes.FakeDomains,
    shared: fakes.FakeShared,
    clique_id: str,
    mode: str,
    message: str,
) -> None:
    s = fakes.device_state(tmp_path, domains, shared=shared, clique_id=clique_id)
    with pytest.raises(errors.PermanentError) as caught:
        await s.prepare(_claim("x1", CD_X, mode=mode), wait_s=1)
    assert message in str(caught.value)
    entry = await _entry(s, "x1")
    assert entry is not None and entry.state is State.PREPARE_ABORTED
    assert shared.registry == {} and not shared.label and s.holder == ""


async def test_a_scope_annotation_naming_no_scope_is_refused_for_good(
    tmp_path: Path, domains: fakes.FakeDomains, shared: fakes.FakeShared
) -> None:
    domains.cds[CD_X] = fakes.compute_domain(CD_X, name="x", scope="perRack")
    s = fakes.device_state(tmp_path, domains, shared=shared)
    with pytest.raises(errors.PermanentError, match="'perRack' is not one of perDomain, perClique"):
        await s.prepare(_claim("x1", CD_X), wait_s=1)


async def test_the_wait_is_on_the_shared_imex_and_retries_keep_the_channel(
    tmp_path: Path, domains: fakes.FakeDomains, shared: fakes.FakeShared
) -> None:
    shared.ready = False
    s = fakes.device_state(tmp_path, domains, shared=shared)
    with pytest.raises(errors.TemporaryError, match="shared IMEX is not Ready yet"):
        await s.prepare(_claim("x1", CD_X), wait_s=0.1)
    entry = await _entry(s, "x1")
    assert entry is not None and entry.state is State.PREPARE_STARTED
    assert s.holder == sharedimex.SHARED_HOLDER
    task = asyncio.create_task(s.prepare(_claim("x1", CD_X), wait_s=5))
    shared.waiting.clear()
    await asyncio.wait_for(shared.waiting.wait(), 1)
    shared.make_ready()
    await asyncio.wait_for(task, 1)
    assert _channels(tmp_path, "x1") == ["/dev/nvidia-caps-imex-channels/channel1"]
    assert sharedimex.channels(shared.registry) == {CD_X: 1}


async def test_after_a_restart_the_checkpoint_keeps_the_node_in_the_per_clique_scope(
    tmp_path: Path, domains: fakes.FakeDomains, shared: fakes.FakeShared
) -> None:
    s = fakes.device_state(tmp_path, domains, shared=shared)
    await s.open_for_boot("boot-1")
    await s.prepare(_claim("x1", CD_X), wait_s=1)
    again = fakes.device_state(tmp_path, domains, shared=shared)
    await again.open_for_boot("boot-1")
    assert again.holder == sharedimex.SHARED_HOLDER, "label not seen yet: the entry's scope"
    with pytest.raises(computedomain.NodeHeldError, match="perClique scope"):
        await again.prepare(_claim("a1", CD_A, slot=1), wait_s=1)
    await again.unprepare("x1")
    assert shared.node_annotations == {} and domains.node_label == ""


async def test_the_shared_label_seen_on_the_node_puts_a_free_node_in_the_scope(
    tmp_path: Path, domains: fakes.FakeDomains, shared: fakes.FakeShared
) -> None:
    holders: list[str] = []
    s = fakes.device_state(tmp_path, domains, shared=shared, holders=holders)
    s.set_node_labels(holder.NodeLabels(shared_imex=True))
    assert s.holder == sharedimex.SHARED_HOLDER and holders == [sharedimex.SHARED_HOLDER]
    s.set_node_labels(holder.NodeLabels())
    assert s.holder == "" and holders[-1] == ""
    await s.prepare(_claim("a1", CD_A), wait_s=1)  # free again: a per-domain CD takes it
    assert s.holder == CD_A
