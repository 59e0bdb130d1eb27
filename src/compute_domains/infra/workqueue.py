"""A keyed, de-duplicating asyncio work queue with delayed adds and per-key backoff.

Semantics (those of client-go's rate-limited queue, minus its threads):
- A key is in the queue at most once: adding a queued key does nothing, so a burst of events
  for one ComputeDomain becomes one reconcile.
- A key is handed to at most one worker at a time. Adding it while a worker holds it marks it
  dirty; ``done`` then puts it back, so no event that arrived during processing is lost.
- ``add(key, delay)`` makes the key due after ``delay`` seconds; a later-due add never
  postpones an earlier one (the earliest due time wins).
- ``retry(key)`` adds the key after the next step of its own exponential backoff; ``forget``
  resets that count after a success.

Invariants: the queue holds no tasks of its own; waiting happens inside ``get``. Time is the
running loop's clock unless a clock is injected.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from compute_domains.infra import backoff

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """Keyed, de-duplicating work queue for any number of concurrent workers."""

    def __init__(
        self,
        *,
        retry_backoff: backoff.Backoff,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._backoff = retry_backoff
        self._clock = clock
        self._ready: collections.deque[K] = collections.deque()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._due: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._seq = 0
        self._failures: dict[K, int] = {}
        self._wakeup = asyncio.Event()

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def __len__(self) -> int:
        """Keys waiting to be handed out (ready now or scheduled for later)."""
        return len(self._queued) + len(self._due.keys() - self._queued)

    @property
    def processing(self) -> frozenset[K]:
        """Keys a worker holds right now."""
        return frozenset(self._processing)

    def add(self, key: K, delay: float = 0.0) -> None:
        """Make ``key`` due after ``delay`` seconds (now when ``delay <= 0``)."""
        if delay <= 0:
            self._add_now(key)
            return
        if key in self._queued or key in self._dirty:
            return
        due = self._now() + delay
        current = self._due.get(key)
        if current is not None and current <= due:
            return
        self._due[key] = due
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, key))
        self._wakeup.set()

    def retry(self, key: K, delay: float | None = None) -> float:
        """Re-add ``key`` after its next backoff step, or ``delay`` if longer; returns the wait."""
        attempt = self._failures.get(key, 0)
        self._failures[key] = attempt + 1
        wait = max(self._backoff.delay(attempt), delay or 0.0)
        self.add(key, max(wait, 1e-3))
        return wait

    def failures(self, key: K) -> int:
        """How many retries ``key`` had since it last succeeded."""
        return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        """Reset the backoff of ``key`` (call after it was processed successfully)."""
        self._failures.pop(key, None)

    async def get(self) -> K:
        """Wait for the next due key and hand it to the caller, who must call ``done``."""
        while True:
            self._promote_due()
            if self._ready:
                key = self._ready.popleft()
                self._queued.discard(key)
                self._processing.add(key)
                return key
            self._wakeup.clear()
            timeout = self._heap[0][0] - self._now() if self._heap else None
            try:
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    def done(self, key: K) -> None:
        """Release ``key``; if it was added meanwhile, it is queued again at once."""
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self._add_now(key)

    def _add_now(self, key: K) -> None:
        self._due.pop(key, None)
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._ready.append(key)
        self._wakeup.set()

    def _promote_due(self) -> None:
        now = self._now()
        while self._heap and self._heap[0][0] <= now:
            due, _, key = heapq.heappop(self._heap)
            if self._due.get(key) == due:
                self._add_now(key)
