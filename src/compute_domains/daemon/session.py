"""Tell the node's CD that ``nvidia-imex`` cannot start because another one holds the session.

The driver allows one IMEX session owner per node. When a host ``nvidia-imex.service`` runs
(installed with the driver packages and enabled by default on many images), the containerised
``nvidia-imex`` logs ``NV_ERR_IN_USE Failed to allocate Imex session`` and exits; the supervisor
restarts it with a backoff, and without this module all an operator sees is a CD that never
turns Ready and ``ImexRestarted`` Events on a pod (upstream #524).

:class:`SessionWatch` reads each line IMEX prints (``on_line``, the supervisor's output hook)
and, when the child that printed ``NV_ERR_IN_USE`` exits (``on_exit``, from the restart hook),
posts (through ``post``) one Warning Event ``ImexSessionInUse`` on the daemon's pod and one on
its ComputeDomain, naming the node and saying what to do, and logs it. Its ``run()`` task also
puts what is wrong on our pod (annotation ``compute-domains/imex-blocked``), where the
controller's status reads it into the node's NotReady text, until :meth:`SessionWatch.imex_ok`
(IMEX passed its own check) removes it. The clique's shared IMEX (``agent.shared``) passes
``on_note`` instead and runs no ``run()``: its note goes into the clique's registry. The
message is the same on every retry, so the recorder counts repeats on one Event instead of
making a new one per restart. Supervision goes on: once the host service is stopped, the next
restart takes the session.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Final

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from compute_domains.api import names
from compute_domains.daemon.config import Identity
from compute_domains.infra import backoff

logger = logging.getLogger(__name__)

IN_USE_MARK: Final = "NV_ERR_IN_USE"
"""What IMEX prints when the node's IMEX session has another owner."""

Post = Callable[[str], None]
"""Posts one Warning Event with the given message (on the pod and on the CD)."""


IN_USE_NOTE: Final = (
    f"nvidia-imex cannot start: the node's IMEX session is held by another nvidia-imex "
    f"({IN_USE_MARK}), most likely a host nvidia-imex.service; disable and mask it"
)
"""What is wrong, without the node (the pod annotation; the CD status prefixes the node)."""


def in_use_message(node: str) -> str:
    """What the Event says: which node, why, and what to do."""
    return (
        f"node {node}: nvidia-imex cannot start: the node's IMEX session is held by another "
        f"nvidia-imex ({IN_USE_MARK}), most likely a host nvidia-imex.service; the driver allows "
        "one session owner per node. On the node run `systemctl disable --now "
        "nvidia-imex.service && systemctl mask nvidia-imex.service`; this daemon keeps retrying "
        "and starts once the session is free"
    )


class SessionWatch:
    """Spots IMEX's ``NV_ERR_IN_USE`` and reports it when that child exits."""

    def __init__(
        self, node: str, post: Post, *, on_note: Callable[[str], None] | None = None
    ) -> None:
        self._node = node
        self._post = post
        self._on_note = on_note
        self._seen = False
        self.reports = 0
        """How many exits were reported as session in use."""
        self.note = ""
        """What our pod's annotation should say ("" for none)."""
        self._changed = asyncio.Event()

    def on_line(self, line: str) -> None:
        """One line the current child printed."""
        if IN_USE_MARK in line:
            self._seen = True

    def on_exit(self) -> None:
        """The current child exited; report if it said the session is in use."""
        if not self._seen:
            return
        self._seen = False  # the next child gets a fresh look
        self.reports += 1
        message = in_use_message(self._node)
        logger.error("%s", message, extra={"node": self._node})
        self._post(message)
        self._set(IN_USE_NOTE)

    def imex_ok(self) -> None:
        """IMEX passed its own check: the session is ours; the annotation goes."""
        self._set("")

    def _set(self, note: str) -> None:
        if note != self.note:
            self.note = note
            self._changed.set()
            if self._on_note is not None:  # the shared IMEX: into the registry, not a pod
                self._on_note(note)

    async def run(
        self,
        client: AsyncClient,
        ident: Identity,
        *,
        retry: backoff.Backoff,
        rng: random.Random,
    ) -> None:
        """Keep our pod's annotation at :attr:`note` until cancelled (failures retry)."""
        written, attempt = "", 0
        while True:
            await self._changed.wait()
            self._changed.clear()
            wanted = self.note
            if wanted == written:
                continue
            body = {"metadata": {"annotations": {names.IMEX_BLOCKED_ANNOTATION: wanted or None}}}
            try:
                await client.patch(
                    Pod,
                    ident.pod_name,
                    body,
                    namespace=ident.pod_namespace,
                    patch_type=PatchType.MERGE,
                )
            except (httpx.HTTPError, OSError) as err:
                delay = retry.delay(attempt, rng)
                attempt += 1
                logger.warning("cannot annotate our pod (%s); retrying in %.2fs", err, delay)
                self._changed.set()
                await asyncio.sleep(delay)
                continue
            written, attempt = wanted, 0
