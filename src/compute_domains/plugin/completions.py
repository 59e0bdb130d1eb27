"""Step 3 of a node's prepares, done together: the claims that reach it while the node is busy.

A prepare's last step (``state``) writes the claim's files and records ``PrepareCompleted`` in
one checkpoint transaction. A node's prepares that waited together (four workload pods of one
node, NVIDIA's issue #816) would take that step one after another, one thread hop for the files
and one save each. Instead each queues its ``Completion`` here, and the first of them to get the
node's transaction completes every one queued (``complete``): one thread writes all their files,
one save records them all. Every completion gets its own outcome on its future: its devices, its
own failure (claim files it could not write; unprepared while it waited), or the failure of the
whole (the save) as a retryable error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Awaitable, Callable

from compute_domains.infra import errors
from compute_domains.plugin import checkpoint

State = checkpoint.ClaimState
Devices = tuple[checkpoint.PreparedDevice, ...]


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Completion:
    """A prepare at step 3, queued to be completed with the others of its node."""

    uid: str
    ref: str
    """The claim as error texts name it (``namespace/name``)."""
    write: Callable[[], Devices]
    """Blocking: write the claim's files; its devices."""
    done: asyncio.Future[Devices] = dataclasses.field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Queue:
    """The completions of one node not yet taken into a transaction."""

    def __init__(self) -> None:
        self._pending: list[Completion] = []

    def add(self, c: Completion) -> None:
        """Queue ``c``."""
        self._pending.append(c)

    def take(self) -> list[Completion]:
        """Every completion queued, in order; the queue is empty afterwards."""
        taken, self._pending = self._pending, []
        return taken

    def drop(self, c: Completion) -> None:
        """Forget ``c`` if it is still queued (its prepare went); a failed attempt's outcome
        given later goes unheard."""
        if c in self._pending:
            self._pending.remove(c)
        if c.done.done():
            _ = c.done.cancelled() or c.done.exception()  # heard
        else:
            c.done.cancel()


def settle(done: asyncio.Future[Devices], outcome: Devices | BaseException) -> None:
    """Give a completion its outcome, unless it has one (or its prepare went)."""
    if done.done():
        return
    if isinstance(outcome, BaseException):
        done.set_exception(outcome)
    else:
        done.set_result(outcome)


async def complete(
    current: checkpoint.Checkpoint,
    batch: list[Completion],
    save: Callable[[checkpoint.Checkpoint], Awaitable[None]],
    now: datetime.datetime,
) -> None:
    """Complete ``batch`` against ``current`` (under the node's transaction); every
    completion's outcome goes to its future, a failure of the whole to all of them."""
    try:
        await _complete(current, batch, save, now)
    except BaseException as err:
        # The others' prepares go on (their attempts retry): a cancellation of the one that
        # took the batch is not theirs.
        told: BaseException = err
        if not isinstance(err, Exception):
            why = type(err).__name__
            told = errors.TemporaryError(f"completing this claim was interrupted ({why})")
        for c in batch:
            settle(c.done, told)
        raise


async def _complete(
    current: checkpoint.Checkpoint,
    batch: list[Completion],
    save: Callable[[checkpoint.Checkpoint], Awaitable[None]],
    now: datetime.datetime,
) -> None:
    todo: list[tuple[Completion, checkpoint.ClaimEntry]] = []
    for c in batch:
        entry = current.get(c.uid)
        if entry is None or not entry.state.live:
            why = f"claim {c.ref} was unprepared while its prepare waited; not preparing"
            settle(c.done, errors.PermanentError(why))
        elif entry.state is State.PREPARE_COMPLETED:
            settle(c.done, entry.devices)
        else:
            todo.append((c, entry))
    if not todo:
        return
    written = await asyncio.to_thread(_write_all, [c for c, _ in todo])
    new = current
    for (_c, entry), result in zip(todo, written, strict=True):
        if not isinstance(result, Exception):
            new = new.with_claim(
                dataclasses.replace(
                    entry, state=State.PREPARE_COMPLETED, devices=result, updated_at=now
                )
            )
    await save(new)
    for (c, _entry), result in zip(todo, written, strict=True):
        settle(c.done, result)


def _write_all(batch: list[Completion]) -> list[Devices | Exception]:
    """Blocking: each completion's files; a claim's failure is its own outcome."""
    out: list[Devices | Exception] = []
    for c in batch:
        try:
            out.append(c.write())
        except Exception as err:  # told to that claim's prepare, which retries or reports it
            out.append(err)
    return out
