"""Step 3 done together (``plugin.completions``): each completion gets its own outcome."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from compute_domains.infra import errors
from compute_domains.plugin import checkpoint, completions

State = checkpoint.ClaimState
NOW = datetime.datetime(2026, 12, 6, tzinfo=datetime.UTC)


def _device(name: str) -> checkpoint.PreparedDevice:
    return checkpoint.PreparedDevice(
        request_names=("channel",),
        pool_name="node-a",
        device_name=name,
        cdi_device_ids=(f"k8s.compute-domain.nvidia.com/claim={name}",),
    )


def _started(*uids: str) -> checkpoint.Checkpoint:
    cp = checkpoint.Checkpoint()
    for uid in uids:
        cp = cp.with_claim(
            checkpoint.ClaimEntry(
                uid=uid,
                namespace="ns",
                name=uid,
                state=State.PREPARE_STARTED,
                started_at=NOW,
                updated_at=NOW,
            )
        )
    return cp


def _completion(uid: str, device: str | Exception) -> completions.Completion:
    def write() -> tuple[checkpoint.PreparedDevice, ...]:
        if isinstance(device, Exception):
            raise device
        return (_device(device),)

    return completions.Completion(uid, f"ns/{uid}", write)


async def test_a_claims_own_failure_is_its_own_and_the_rest_are_saved_at_once() -> None:
    saved: list[checkpoint.Checkpoint] = []

    async def save(cp: checkpoint.Checkpoint) -> None:
        saved.append(cp)

    ok = _completion("a", "channel-0")
    broken = _completion("b", errors.TemporaryError("capability file unreadable"))
    gone = _completion("c", "channel-2")  # unprepared while it waited: not in the checkpoint
    await completions.complete(_started("a", "b"), [ok, broken, gone], save, NOW)
    assert [d.device_name for d in await ok.done] == ["channel-0"]
    with pytest.raises(errors.TemporaryError, match="capability"):
        await broken.done
    with pytest.raises(errors.PermanentError, match="unprepared while its prepare waited"):
        await gone.done
    (cp,) = saved
    assert {uid: e.state for uid, e in cp.claims.items()} == {
        "a": State.PREPARE_COMPLETED,
        "b": State.PREPARE_STARTED,
    }


async def test_a_failed_save_fails_every_completion_of_the_batch() -> None:
    async def save(cp: checkpoint.Checkpoint) -> None:
        raise OSError("disk full")

    batch = [_completion("a", "channel-0"), _completion("b", "channel-1")]
    with pytest.raises(OSError, match="disk full"):
        await completions.complete(_started("a", "b"), batch, save, NOW)
    for c in batch:
        with pytest.raises(OSError, match="disk full"):
            await c.done


async def test_an_interrupted_batch_is_a_retryable_error_for_the_others() -> None:
    entered = asyncio.Event()

    async def save(cp: checkpoint.Checkpoint) -> None:
        entered.set()
        await asyncio.Event().wait()  # never returns: the batch's own task is cancelled

    other = _completion("b", "channel-1")
    task = asyncio.create_task(
        completions.complete(_started("a", "b"), [_completion("a", "channel-0"), other], save, NOW)
    )
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(errors.TemporaryError, match="interrupted"):
        await other.done
