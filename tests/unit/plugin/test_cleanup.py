"""The cleanup steps that need no API (stale-claim checks are covered by integration G2)."""

import dataclasses
import datetime
from pathlib import Path
from typing import Any, cast

from lightkube import AsyncClient

from compute_domains.api import names, sharedimex
from compute_domains.infra import errors
from compute_domains.plugin import cdi, checkpoint, cleanup
from compute_domains.plugin.config import CleanupSettings
from tests.unit.plugin import fakes

CD_A = "aaaaaaaa-0000-4000-8000-00000000000a"
NOW = datetime.datetime(2026, 5, 1, 12, tzinfo=datetime.UTC)


def _sweeper(
    tmp_path: Path, domains: fakes.FakeDomains, shared: fakes.FakeShared | None = None
) -> tuple[Any, Any]:
    shared = shared or fakes.FakeShared(domains)
    s = fakes.device_state(tmp_path, domains, shared=shared)
    sweeper = cleanup.Cleanup(
        client=cast(AsyncClient, None),
        device_state=s,
        domains=domains,
        shared_imex=shared,
        settings=CleanupSettings(tombstone_ttl_s=60),
        node=fakes.NODE,
        now=lambda: NOW,
    )
    return s, sweeper


def _channel(uid: str, slot: int = 0) -> Any:
    return fakes.claim(
        uid, [fakes.result(f"channel-{slot}")], [fakes.config_entry(fakes.channel_config(CD_A))]
    )


async def test_old_tombstones_expire_and_young_ones_stay(tmp_path: Path) -> None:
    domains = fakes.FakeDomains(fakes.compute_domain(CD_A))
    domains.ready = {CD_A}
    s, sweeper = _sweeper(tmp_path, domains)
    for uid in ("old", "young"):
        await s.prepare(_channel(uid, slot=0 if uid == "old" else 1), wait_s=1)
        await s.unprepare(uid)
    async with s.transaction() as txn:
        old = txn.current.get("old")
        young = txn.current.get("young")
        assert old is not None and young is not None
        await txn.save(
            txn.current.with_claim(
                dataclasses.replace(old, updated_at=NOW - datetime.timedelta(seconds=120))
            ).with_claim(dataclasses.replace(young, updated_at=NOW))
        )
    await sweeper._expire_tombstones()
    async with s.transaction() as txn:
        assert set(txn.current.claims) == {"young"}


async def test_orphaned_specs_go_and_live_ones_stay(tmp_path: Path) -> None:
    domains = fakes.FakeDomains(fakes.compute_domain(CD_A))
    domains.ready = {CD_A}
    s, sweeper = _sweeper(tmp_path, domains)
    await s.prepare(_channel("live"), wait_s=1)
    orphan = cdi.build_claim_spec("orphan", {"channel-1": cdi.channel_edits([0], major=1)})
    assert orphan is not None
    s.writer.write_claim_spec(orphan)
    await sweeper._orphan_specs()
    assert s.writer.claim_uids() == ["live"]


async def test_a_label_no_claim_needs_is_removed(tmp_path: Path) -> None:
    domains = fakes.FakeDomains(fakes.compute_domain(CD_A))
    domains.ready = {CD_A}
    s, sweeper = _sweeper(tmp_path, domains)
    domains.node_label = "left-by-a-crash"
    await sweeper._stray_label()
    assert domains.node_label == ""
    await s.prepare(_channel("live"), wait_s=1)
    await sweeper._stray_label()
    assert domains.node_label == CD_A, "a label a live claim holds stays"


async def test_folders_of_deleted_domains_go(tmp_path: Path) -> None:
    domains = fakes.FakeDomains(fakes.compute_domain(CD_A))
    s, sweeper = _sweeper(tmp_path, domains)
    for uid in (CD_A, "gone"):
        s.domain_dir(uid).mkdir(parents=True)
    await sweeper._domain_dirs()
    base = tmp_path / "var/lib/kubelet/plugins" / names.DRIVER_NAME / "domains"
    assert sorted(p.name for p in base.iterdir()) == [CD_A]


async def test_channel_annotations_no_claim_needs_are_removed_and_the_label_stays(
    tmp_path: Path,
) -> None:
    cd_x = "xxxxxxxx-0000-4000-8000-00000000000x"
    domains = fakes.FakeDomains(fakes.compute_domain(cd_x, scope="perClique"))
    shared = fakes.FakeShared(domains)
    s, sweeper = _sweeper(tmp_path, domains, shared)
    await s.prepare(
        fakes.claim(
            "live", [fakes.result("channel-0")], [fakes.config_entry(fakes.channel_config(cd_x))]
        ),
        wait_s=1,
    )
    shared.node_annotations[sharedimex.channel_key("left-by-a-crash")] = "7"
    await sweeper._stray_channels()
    assert shared.node_annotations == {sharedimex.channel_key(cd_x): "1"}
    assert shared.label


async def test_the_shared_imex_folder_is_never_taken_for_a_deleted_cds(tmp_path: Path) -> None:
    domains = fakes.FakeDomains()
    s, sweeper = _sweeper(tmp_path, domains)
    s.domain_dir("shared-imex").mkdir(parents=True)
    await sweeper._domain_dirs()
    assert s.domain_dir("shared-imex").is_dir()


class _LabelReadFails(fakes.FakeDomains):
    async def label_value(self) -> str:
        raise errors.TemporaryError("API down")


async def test_a_failing_step_does_not_stop_the_pass(tmp_path: Path) -> None:
    domains = _LabelReadFails(fakes.compute_domain(CD_A))
    domains.ready = {CD_A}
    s, sweeper = _sweeper(tmp_path, domains)
    await s.prepare(_channel("live"), wait_s=1)
    async with s.transaction() as txn:
        entry = txn.current.get("live")
        assert entry is not None
        # An entry without a name is never checked against the API (no client needed here).
        await txn.save(txn.current.with_claim(dataclasses.replace(entry, name="")))
    s.domain_dir("gone").mkdir(parents=True)
    await sweeper.run_once()  # the label step fails, the folder step after it still runs
    assert not s.domain_dir("gone").exists()
    assert isinstance(await s.unprepare("live"), checkpoint.ClaimEntry)
