import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from compute_domains.api import names
from compute_domains.infra import errors, filelock
from compute_domains.plugin import cdi, checkpoint, computedomain, configs, holder
from compute_domains.plugin import state as st
from tests.unit.plugin import fakes

CD_A, CD_B = "aaaaaaaa-0000-4000-8000-00000000000a", "bbbbbbbb-0000-4000-8000-00000000000b"
State = checkpoint.ClaimState


def _channel_claim(uid: str, slot: int = 0, cd: str = CD_A, **kw: Any) -> configs.Claim:
    return fakes.claim(
        uid, [fakes.result(f"channel-{slot}")], [fakes.config_entry(fakes.channel_config(cd))], **kw
    )


async def _entry(s: st.DeviceState, uid: str) -> checkpoint.ClaimEntry | None:
    async with s.transaction() as txn:
        return txn.current.get(uid)


@pytest.fixture
def domains() -> fakes.FakeDomains:
    d = fakes.FakeDomains(fakes.compute_domain(CD_A), fakes.compute_domain(CD_B, name="other"))
    d.ready = {CD_A, CD_B}
    return d


async def test_channel_prepare_labels_node_writes_spec_and_completes(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    holders: list[str] = []
    s = fakes.device_state(tmp_path, domains, holders=holders)
    claim = _channel_claim("c1", slot=2)
    devices = await s.prepare(claim, wait_s=1)
    assert [(d.device_name, d.cdi_device_ids) for d in devices] == [
        ("channel-2", (f"{cdi.CLAIM_KIND}=c1-channel-2",))
    ]
    assert domains.node_label == CD_A
    assert s.holder == CD_A and holders[-1] == CD_A
    spec = json.loads((tmp_path / "var/run/cdi" / cdi.claim_spec_file_name("c1")).read_text())
    nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
    assert [(n["path"], n["major"], n["minor"]) for n in nodes] == [
        ("/dev/nvidia-caps-imex-channels/channel0", fakes.CHANNEL_MAJOR, 0)
    ]
    entry = await _entry(s, "c1")
    assert entry is not None and entry.state is State.PREPARE_COMPLETED
    edits = spec["devices"][0]["containerEdits"]
    assert f"COMPUTE_DOMAIN_UUID={CD_A}" in edits["env"]
    (mount,) = edits["mounts"]
    assert (mount["containerPath"], mount["options"][0]) == ("/imexd", "ro")
    assert (tmp_path / mount["hostPath"].lstrip("/")).is_dir(), "the folder to mount exists"


async def test_prepare_is_idempotent(tmp_path: Path, domains: fakes.FakeDomains) -> None:
    s = fakes.device_state(tmp_path, domains)
    first = await s.prepare(_channel_claim("c1"), wait_s=1)
    domains.node_label = ""  # a completed claim is not re-checked
    again = await s.prepare(_channel_claim("c1"), wait_s=1)
    assert first == again and domains.node_label == ""


async def test_all_mode_injects_every_channel(tmp_path: Path, domains: fakes.FakeDomains) -> None:
    s = fakes.device_state(tmp_path, domains)
    claim = fakes.claim(
        "c1", [fakes.result("channel-0")], [fakes.config_entry(fakes.channel_config(CD_A, "All"))]
    )
    await s.prepare(claim, wait_s=1)
    spec = json.loads((tmp_path / "var/run/cdi" / cdi.claim_spec_file_name("c1")).read_text())
    nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
    assert len(nodes) == 2048 and nodes[-1]["path"].endswith("/channel2047")


async def test_node_without_clique_gets_no_device_nodes(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    s = fakes.device_state(tmp_path, domains, clique_id="")
    devices = await s.prepare(_channel_claim("c1"), wait_s=1)
    assert devices[0].cdi_device_ids == ()
    assert not (tmp_path / "var/run/cdi" / cdi.claim_spec_file_name("c1")).exists()
    assert domains.node_label == CD_A


async def test_label_is_reference_counted_per_domain(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    holders: list[str] = []
    s = fakes.device_state(tmp_path, domains, holders=holders)
    await s.prepare(_channel_claim("c1", slot=0), wait_s=1)
    await s.prepare(_channel_claim("c2", slot=1), wait_s=1)
    assert domains.label_writes == 1
    assert await s.unprepare("c1") is not None
    assert domains.node_label == CD_A and s.holder == CD_A
    assert await s.unprepare("c2") is not None
    assert domains.node_label == "" and s.holder == "" and holders[-1] == ""
    assert not (tmp_path / "var/run/cdi" / cdi.claim_spec_file_name("c2")).exists()


async def test_the_domain_folder_goes_with_the_last_claim_of_its_domain(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    s = fakes.device_state(tmp_path, domains)
    await s.prepare(_channel_claim("c1", slot=0), wait_s=1)
    await s.prepare(_channel_claim("c2", slot=1), wait_s=1)
    folder = s.domain_dir(CD_A)
    assert folder.is_relative_to(tmp_path)
    (folder / "imexd.cfg").write_text("# what the daemon writes\n")
    assert await s.unprepare("c1") is not None
    assert (folder / "imexd.cfg").exists(), "another claim of the CD still uses it"
    assert await s.unprepare("c2") is not None
    assert not folder.exists()


async def test_unprepare_logs_the_claim_leaving_the_checkpoint_in_nvidias_words(
    tmp_path: Path, domains: fakes.FakeDomains, caplog: pytest.LogCaptureFixture
) -> None:
    s = fakes.device_state(tmp_path, domains)
    await s.prepare(_channel_claim("c1", namespace="ns", name="rc"), wait_s=1)
    with caplog.at_level(logging.DEBUG, logger=st.__name__):
        assert await s.unprepare("c1") is not None
        assert await s.unprepare("c1") is None  # a no-op deletes nothing and says nothing
    lines = [r.getMessage() for r in caplog.records if "checkpoint" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("Deleted claim from checkpoint: ns/rc ")


async def test_a_node_held_by_one_domain_refuses_another(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    s = fakes.device_state(tmp_path, domains)
    await s.prepare(_channel_claim("c1", cd=CD_A), wait_s=1)
    with pytest.raises(computedomain.NodeHeldError, match=CD_A):
        await s.prepare(_channel_claim("c2", slot=1, cd=CD_B), wait_s=1)
    assert await _entry(s, "c2") is None
    assert domains.node_label == CD_A


async def test_bad_config_fails_permanently_and_is_recorded_aborted(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    s = fakes.device_state(tmp_path, domains)
    claim = fakes.claim(
        "c1",
        [fakes.result("channel-0")],
        [fakes.config_entry(fakes.channel_config(CD_A, unexpectedField="foo"))],
    )
    strict = 'strict decoding error: unknown field "unexpectedField"'  # NVIDIA's tests grep it
    with pytest.raises(errors.PermanentError, match=strict):
        await s.prepare(claim, wait_s=1)
    entry = await _entry(s, "c1")
    assert entry is not None and entry.state is State.PREPARE_ABORTED and entry.name == "claim-c1"
    assert domains.node_label == ""


async def test_claim_in_another_namespace_than_its_domain_fails_permanently(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    s = fakes.device_state(tmp_path, domains)
    with pytest.raises(errors.PermanentError, match="another namespace"):
        await s.prepare(_channel_claim("c1", namespace="elsewhere"), wait_s=1)
    assert domains.node_label == ""


async def test_not_ready_is_retryable_and_keeps_the_label_until_unprepare(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    domains.ready = set()
    s = fakes.device_state(tmp_path, domains)
    with pytest.raises(errors.TemporaryError, match="not ready"):
        await s.prepare(_channel_claim("c1"), wait_s=0.1)
    entry = await _entry(s, "c1")
    assert entry is not None and entry.state is State.PREPARE_STARTED
    assert domains.node_label == CD_A and s.holder == CD_A
    await s.unprepare("c1")
    assert domains.node_label == "" and s.holder == ""


async def test_prepare_returns_as_soon_as_the_daemon_is_ready(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    domains.ready = set()
    s = fakes.device_state(tmp_path, domains)
    task = asyncio.create_task(s.prepare(_channel_claim("c1"), wait_s=5))
    await asyncio.wait_for(domains.waiting.wait(), 1)
    assert not task.done()
    domains.make_ready(CD_A)
    devices = await asyncio.wait_for(task, 1)
    assert devices[0].device_name == "channel-0"


async def test_unprepare_during_the_wait_wins(tmp_path: Path, domains: fakes.FakeDomains) -> None:
    domains.ready = set()
    s = fakes.device_state(tmp_path, domains)
    task = asyncio.create_task(s.prepare(_channel_claim("c1"), wait_s=5))
    await asyncio.wait_for(domains.waiting.wait(), 1)
    await s.unprepare("c1")
    domains.make_ready(CD_A)
    with pytest.raises(errors.PermanentError, match="unprepared while"):
        await task
    assert domains.node_label == ""
    assert not (tmp_path / "var/run/cdi" / cdi.claim_spec_file_name("c1")).exists()


async def test_late_prepare_of_an_unprepared_claim_version_is_refused(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    s = fakes.device_state(tmp_path, domains)
    await s.prepare(_channel_claim("c1", rv="5"), wait_s=1)
    await s.unprepare("c1")
    with pytest.raises(errors.PermanentError, match="late prepare"):
        await s.prepare(_channel_claim("c1", rv="5"), wait_s=1)
    # A newer version of the claim (reserved again by another pod) is prepared normally.
    await s.prepare(_channel_claim("c1", rv="9"), wait_s=1)
    entry = await _entry(s, "c1")
    assert entry is not None and entry.state is State.PREPARE_COMPLETED


async def test_unprepare_of_unknown_or_unprepared_claims_is_a_no_op(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    s = fakes.device_state(tmp_path, domains)
    assert await s.unprepare("never") is None
    await s.prepare(_channel_claim("c1"), wait_s=1)
    assert await s.unprepare("c1") is not None
    assert await s.unprepare("c1") is None


async def test_a_device_held_by_a_completed_claim_is_not_handed_out_twice(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    s = fakes.device_state(tmp_path, domains)
    await s.prepare(_channel_claim("c1", slot=1), wait_s=1)
    with pytest.raises(errors.TemporaryError, match="already allocated"):
        await s.prepare(_channel_claim("c2", slot=1), wait_s=1)


async def test_daemon_claim_gets_identity_folder_and_capability(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    (tmp_path / "fabric-imex-mgmt").write_text(
        "DeviceFileMinor: 5\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
    )
    template = tmp_path / "imexd.cfg.tmpl"
    template.write_text("SERVER_PORT=50000\n")
    s = fakes.device_state(tmp_path, domains, imex_config_template=template)
    claim = fakes.claim(
        "d1",
        [fakes.result("daemon-0", request="daemon")],
        [fakes.config_entry(fakes.daemon_config(CD_A))],
        namespace="driver",
    )
    devices = await s.prepare(claim, wait_s=1)
    assert devices[0].cdi_device_ids == (cdi.BASE_DEVICE_ID, f"{cdi.CLAIM_KIND}=d1-daemon-0")
    folder = tmp_path / "var/lib/kubelet/plugins" / names.DRIVER_NAME / "domains" / CD_A
    assert (folder / "imexd.cfg.tmpl").read_text() == "SERVER_PORT=50000\n"
    spec = json.loads((tmp_path / "var/run/cdi" / cdi.claim_spec_file_name("d1")).read_text())
    edits = spec["devices"][0]["containerEdits"]
    assert f"COMPUTE_DOMAIN_UUID={CD_A}" in edits["env"]
    assert f"CLIQUE_ID={fakes.CLIQUE}" in edits["env"]
    assert (
        edits["mounts"][0]["hostPath"]
        == f"/var/lib/kubelet/plugins/{names.DRIVER_NAME}/domains/{CD_A}"
    )
    assert edits["mounts"][0]["containerPath"] == "/imexd"
    assert edits["deviceNodes"][0]["path"] == "/dev/nvidia-caps/nvidia-cap5"
    assert domains.node_label == ""  # daemon claims never label


async def test_daemon_claim_without_capability_file_is_retryable(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    s = fakes.device_state(tmp_path, domains)
    claim = fakes.claim(
        "d1",
        [fakes.result("daemon-0", request="daemon")],
        [fakes.config_entry(fakes.daemon_config(CD_A))],
    )
    with pytest.raises(errors.TemporaryError, match="fabric-imex-mgmt"):
        await s.prepare(claim, wait_s=1)


async def test_reboot_resets_the_checkpoint(tmp_path: Path, domains: fakes.FakeDomains) -> None:
    s = fakes.device_state(tmp_path, domains)
    await s.open_for_boot("boot-1")
    await s.prepare(_channel_claim("c1"), wait_s=1)
    again = fakes.device_state(tmp_path, domains)
    boot = await again.open_for_boot("boot-2")
    assert [e.uid for e in boot.discarded] == ["c1"]
    assert again.holder == ""


async def test_a_second_plugin_process_waits_for_the_node_lock(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    first = fakes.device_state(tmp_path, domains)
    second = fakes.device_state(tmp_path, domains)  # its own mutex and lock file descriptor
    async with first.transaction():
        with pytest.raises(filelock.LockTimeoutError, match="pid="):
            await second.prepare(_channel_claim("c1"), wait_s=1)
    assert (await second.prepare(_channel_claim("c1"), wait_s=1))[0].device_name == "channel-0"
    assert await _entry(first, "c1") is not None, "both see one checkpoint"


async def test_a_warm_label_holds_the_node_for_its_cd_and_unprepare_keeps_it(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    holders: list[str] = []
    s = fakes.device_state(tmp_path, domains, holders=holders)
    s.set_node_labels(holder.NodeLabels(warm_for=CD_A))
    assert s.holder == CD_A and holders[-1] == CD_A  # advertised before any claim
    with pytest.raises(computedomain.NodeHeldError, match=f"warm spare reserved for .*{CD_A}"):
        await s.prepare(_channel_claim("b1", cd=CD_B), wait_s=1)
    assert await _entry(s, "b1") is None  # refused before anything was recorded
    await s.prepare(_channel_claim("a1"), wait_s=1)  # its own claim prepares as today
    assert domains.node_label == CD_A
    await s.unprepare("a1")
    assert (
        domains.node_label == "" and s.holder == CD_A
    )  # the claim label goes, the warm hold stays
    s.set_node_labels(holder.NodeLabels())
    assert s.holder == "" and holders[-1] == ""
    await s.prepare(_channel_claim("b1", cd=CD_B), wait_s=1)
    assert s.holder == CD_B


async def test_a_warm_node_keeps_its_cds_folder_after_the_last_claim(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    """With resident agents the node's agent serves the CD of its warm label with no claim
    here, and its IMEX config lives in the CD's folder: the unprepare of the last claim must
    not take it away (issue 26 point 4: a restarted warm node's IMEX found no config, for good).
    Once the node is no longer warm, the next last claim takes it as before."""
    s = fakes.device_state(tmp_path, domains)
    s.set_node_labels(holder.NodeLabels(warm_for=CD_A))
    await s.prepare(_channel_claim("a1"), wait_s=1)
    folder = s.domain_dir(CD_A)
    (folder / "imexd.agent.cfg").write_text("# what the resident agent writes\n")
    assert await s.unprepare("a1") is not None
    assert (folder / "imexd.agent.cfg").exists(), "the agent serving the warm node still uses it"
    s.set_node_labels(holder.NodeLabels())
    await s.prepare(_channel_claim("a2"), wait_s=1)
    assert await s.unprepare("a2") is not None
    assert not folder.exists()
