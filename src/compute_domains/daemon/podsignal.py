"""Write this node's IMEX readiness signal for our CD on our own pod (``api.imexsignal``).

A resident agent's daemon whose pod declares the signal (``DaemonSettings.ready_signal``)
writes it instead of its clique entry's status: the controller writes the status of every
signalling node of a clique in one patch, so 18 daemons no longer patch one object at once
(docs/decisions/0025). :class:`PodSignal` keeps our pod's annotation
``compute-domains/imex-ready.<cdUID>`` equal to our own IMEX check: set, with a fresh instance
name and the write time, when the check passes (:meth:`PodSignal.set` True); removed when it
fails; removed at shutdown (bounded, like the clique entry's removal). Only our process writes
it, by a JSON merge patch of that one key, so no other writer ever makes it conflict.

A value is never stamped earlier than one second past the second this signal began
(``imexsignal.not_before``, normally long past by the time IMEX passes its check): it must be
newer than the container's start as the API shows it, or the controller reads it as left by a
previous process. Failed writes retry with the daemon's backoff; the newest wish wins.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import time
import uuid
from collections.abc import Callable

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from compute_domains.api import imexsignal
from compute_domains.daemon import kubeio
from compute_domains.daemon.config import Identity
from compute_domains.infra import backoff

logger = logging.getLogger(__name__)


class PodSignal:
    """Our pod's IMEX readiness signal for our CD (module docstring).

    Args:
        client: API client (the pod's ServiceAccount).
        ident: who we are: the pod to annotate and the CD.
        retry: backoff of failed writes.
        remove_timeout: bound of the removal at shutdown, in seconds.
        clock: wall-clock time (epoch seconds; tests pass their own).
        on_written: called after each write with whether the signal is now set; must not
            block.
    """

    def __init__(
        self,
        client: AsyncClient,
        ident: Identity,
        *,
        retry: backoff.Backoff,
        remove_timeout: float = 10.0,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
        on_written: Callable[[bool], None] | None = None,
    ) -> None:
        self._client = client
        self._ident = ident
        self._retry = retry
        self._remove_timeout = remove_timeout
        self._rng = rng or random.Random()
        self._clock = clock
        self._on_written = on_written
        self._not_before = imexsignal.not_before(clock())
        self._key = imexsignal.key(ident.domain_uid)
        self._wanted = False
        self._written: str | None = None
        self._kick = asyncio.Event()
        self._log = logging.LoggerAdapter(logger, {"cd": ident.cd, "node": ident.node_name})

    def set(self, ok: bool) -> None:
        """Our own IMEX check passed (True) or failed; the annotation follows."""
        if ok != self._wanted:
            self._wanted = ok
            self._kick.set()

    async def run(self) -> None:
        """Keep the annotation as wished until cancelled; then remove it (bounded)."""
        try:
            await self._loop()
        finally:
            if self._written is not None:
                try:
                    async with asyncio.timeout(self._remove_timeout):
                        await self._write(None)
                except (TimeoutError, httpx.HTTPError, OSError) as err:
                    self._log.warning("could not remove our IMEX readiness signal: %s", err)

    async def _loop(self) -> None:
        attempt = 0
        while True:
            await self._kick.wait()
            self._kick.clear()
            if self._wanted == (self._written is not None):
                # Wished back before the write that would have changed it: as written.
                if self._on_written is not None:
                    self._on_written(self._wanted)
                continue
            try:
                if self._wanted:
                    wait = self._not_before - self._clock()
                    if wait > 0:  # only a check that passes within a second of our start
                        await asyncio.sleep(wait)
                    stamp = datetime.datetime.fromtimestamp(self._clock(), datetime.UTC)
                    value = imexsignal.encode(stamp, uuid.uuid4().hex[:12])
                    await self._write(value)
                else:
                    await self._write(None)
            except (httpx.HTTPError, OSError) as err:
                delay = self._retry.delay(attempt, self._rng)
                attempt += 1
                self._log.warning(
                    "%s; retrying in %.2fs",
                    kubeio.classify(err, "write our IMEX readiness signal"),
                    delay,
                )
                self._kick.set()
                await asyncio.sleep(delay)
                continue
            attempt = 0

    async def _write(self, value: str | None) -> None:
        ident = self._ident
        body = {"metadata": {"annotations": {self._key: value}}}
        began = asyncio.get_running_loop().time()
        await self._client.patch(
            Pod, ident.pod_name, body, namespace=ident.pod_namespace, patch_type=PatchType.MERGE
        )
        self._written = value
        if self._on_written is not None:
            self._on_written(value is not None)
        self._log.info(
            "%s our IMEX readiness signal on pod %s (write took %.3fs)",
            "set" if value is not None else "removed",
            ident.pod_name,
            asyncio.get_running_loop().time() - began,
        )
