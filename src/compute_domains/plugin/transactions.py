"""The node's checkpoint under its locks: ``Transactions``, the base class of
``state.DeviceState``, opens the checkpoint at start (``open_for_boot``, after taking over
NVIDIA's), runs the transactions over it, keeps the view of it they leave, and judges the
node's holder from that view.

The checkpoint (``checkpoint.json`` in our plugin folder) is the only record of what this node
prepared, and it is re-read whenever a transaction takes the file lock, because a second plugin
process (a rolling update) may have written it. A transaction holds an in-process
``asyncio.Lock`` and the node-local lock file ``pu.lock`` (``fcntl.flock``; a holder that dies
releases it). Transactions are short: no transaction waits for a daemon, so RPCs are never
serialised behind one another. A transaction that ends while others of this process wait for it
hands the next one the file lock and its view of the checkpoint (nobody else can have written
the file in between): a node's concurrent prepares (four workload pods on one node, NVIDIA's
issue #816) queue here, and each queued one then takes no lock and reads no file.

Every checkpoint read or written passes ``observe``, which reports it (``on_checkpoint``) and
judges the holder from it and the Node's labels (``holder.effective``; a change goes to
``on_holder_change``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from compute_domains.infra import filelock
from compute_domains.plugin import cdi, checkpoint, checkpointfile, devices, holder, takeover
from compute_domains.plugin.config import RetrySettings

NodeLabels = holder.NodeLabels  # the property ``holder`` below hides the module in the class
LOCK_FILE = "pu.lock"
"""Name of the node-local lock file in the plugin folder."""


@dataclasses.dataclass(slots=True)
class Transaction:
    """The checkpoint as read under the locks; ``save`` replaces it."""

    current: checkpoint.Checkpoint
    """The checkpoint as of the last read or ``save``."""
    _state: Transactions

    async def save(self, new: checkpoint.Checkpoint) -> None:
        """Write ``new`` atomically and make it this transaction's view."""
        await asyncio.to_thread(checkpointfile.save, self._state.checkpoint_path, new)
        self.current = new
        self._state.observe(new)


class Transactions:
    """The checkpoint of one node under its two locks, and the holder it implies; ``writer``,
    ``offered`` and ``now`` are the subclass's too (``open_for_boot``'s takeover needs them)."""

    def __init__(
        self,
        *,
        node: str,
        plugin_dir: Path,
        retry: RetrySettings,
        writer: cdi.CdiWriter,
        offered: dict[str, devices.Allocatable],
        now: Callable[[], datetime.datetime],
        on_holder_change: Callable[[str], None],
        on_checkpoint: Callable[[checkpoint.Checkpoint], None],
    ) -> None:
        self._node = node
        self._retry = retry
        self.writer = writer
        self._offered = offered
        self._now = now
        self._on_holder_change = on_holder_change
        self._on_checkpoint = on_checkpoint
        self.checkpoint_path = plugin_dir / checkpointfile.FILE_NAME
        self._lock_path = plugin_dir / LOCK_FILE
        self._mutex = asyncio.Lock()
        self._queued = 0
        """Transactions waiting for ``_mutex`` (the one ending hands them its file lock)."""
        self._held: filelock.FileLock | None = None
        """The file lock while a transaction runs, or handed from one to the next queued."""
        self._holder: str | None = None
        self._cp = checkpoint.Checkpoint()
        self._labels = holder.NodeLabels()

    @property
    def holder(self) -> str:
        """What the channel slots advertise as of the last read or write (``holder.effective``):
        the per-domain CD holding the node, ``SHARED_HOLDER`` in the per-clique scope, the CD it
        is a warm spare of, or "" when free."""
        return self._holder or ""

    @property
    def queued(self) -> int:
        """Transactions of this process waiting for the running one."""
        return self._queued

    @property
    def labels(self) -> NodeLabels:
        """The Node's warm-spare and shared-IMEX labels as last seen or written."""
        return self._labels

    def set_node_labels(self, labels: NodeLabels) -> None:
        """The Node's labels changed (the plugin's Node watch); report a holder change."""
        self._labels = labels
        self._judge_holder()

    def shared_label_written(self) -> None:
        """This plugin just wrote the shared-IMEX label (before its Node watch sees it)."""
        self.set_node_labels(dataclasses.replace(self._labels, shared_imex=True))

    def observe(self, cp: checkpoint.Checkpoint) -> None:
        """Note a checkpoint just read or written; report a holder change."""
        self._on_checkpoint(cp)
        self._cp = cp
        self._judge_holder()

    def _judge_holder(self) -> None:
        new = holder.effective(self._cp, self._labels)
        if new != self._holder:
            self._holder = new
            self._on_holder_change(new)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """Hold both locks and the current checkpoint for one read-modify-write.

        Raises:
            filelock.LockTimeoutError: another plugin process held the lock too long (retryable).
        """
        self._queued += 1
        try:
            await self._mutex.acquire()
        except BaseException:
            self._queued -= 1
            if not self._queued and not self._mutex.locked():
                self._let_go()  # handed to this waiter alone, which is gone
            raise
        self._queued -= 1
        hand_over = False
        try:
            if self._held is None:
                lock = self._file_lock()
                await lock.acquire_async()
                self._held = lock
                found = await asyncio.to_thread(checkpointfile.load, self.checkpoint_path)
                self.observe(found if found is not None else checkpoint.Checkpoint())
            # Handed over: the file lock was never let go since the last read or save, so the
            # checkpoint is as the last transaction left it (``observe`` keeps it).
            yield Transaction(current=self._cp, _state=self)
            # A failed transaction lets go: the file may not be what its view says.
            hand_over = self._queued > 0
        finally:
            if not hand_over:
                self._let_go()
            self._mutex.release()

    def _let_go(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.release()

    def _file_lock(self) -> filelock.FileLock:
        return filelock.FileLock(
            self._lock_path, timeout=self._retry.lock_timeout_s, owner=f"plugin {self._node}"
        )

    async def open_for_boot(self, boot_id: str) -> checkpointfile.BootCheck:
        """Load the checkpoint for this boot (reset after a reboot), under the locks.

        A checkpoint NVIDIA's plugin left is converted to ours first (``plugin.takeover``).

        Raises:
            checkpointfile.CheckpointCorruptError: the file cannot be trusted (left in place).
        """
        async with self._mutex:
            self._let_go()  # handed to a transaction queued behind this call: it reads again
            async with self._file_lock():
                await asyncio.to_thread(
                    takeover.take_over,
                    self.checkpoint_path,
                    cdi_root=self.writer.root,
                    node=self._node,
                    offered=self._offered,
                    now=self._now(),
                )
                boot = await asyncio.to_thread(
                    checkpointfile.open_for_boot, self.checkpoint_path, boot_id
                )
        self.observe(boot.checkpoint)
        return boot
