"""Converge the node to what live claims need: stale claims, tombstones, orphans, stray label.

A pass runs at start-up and then every ``interval_s``; each step is independent, and a failing
step is logged and retried by the next pass (nothing here is needed for correctness of a
prepare, only for not leaving things behind). Steps:
1. Stale claims: a live checkpoint entry whose ResourceClaim is gone (NotFound) or was
   re-created (other UID) is unprepared with the normal routine (label reference count, CDI
   spec, tombstone). Upstream does this for ``PrepareStarted`` entries only; we also do it for
   completed and aborted ones, because a deleted claim is no longer used by any pod.
   An entry whose claim still exists is left alone (the kubelet will call unprepare).
2. Tombstones (``UnprepareCompleted``) older than ``tombstone_ttl_s`` are dropped.
3. Claim CDI specs in the CDI root whose claim is not live in the checkpoint are removed (left
   by a crash between unprepare steps, or by claims of an earlier boot).
4. A node label ``resource.nvidia.com/computeDomain`` that no live per-domain channel claim
   holds is removed (left by a reboot or a crash); the daemon of that CD then leaves the node.
   Likewise a Node annotation ``compute-domains/channel.<X>`` (issue 26's per-clique scope) that
   no live per-clique claim of ``X`` needs; the shared-IMEX label is never removed here
   (``eager`` decides it at start).
5. Per-CD folders ``domains/<domain UID>`` are removed once no live claim uses them and the
   ComputeDomain no longer exists (upstream removes them 10 minutes after the CD is gone). The
   unprepare of a CD's last claim on the node removes its folder already; this step is the
   safety net for a crash in between (it runs outside the claim locks, so it leaves the folder
   of an existing CD alone: a prepare may be creating it). The shared IMEX folder
   ``domains/shared-imex`` is the resident agent's and is never removed.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import shutil
from collections.abc import Awaitable, Callable

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.api import sharedimex
from compute_domains.infra import errors, kube
from compute_domains.plugin import checkpoint, computedomain, holder, shared, state
from compute_domains.plugin.config import SHARED_IMEX_DIR, CleanupSettings

logger = logging.getLogger(__name__)

_FAILURES = (errors.ComputeDomainsError, httpx.HTTPError, OSError)


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Cleanup:
    """Periodic convergence of one node's plugin state."""

    def __init__(
        self,
        *,
        client: AsyncClient,
        device_state: state.DeviceState,
        domains: computedomain.DomainPort,
        shared_imex: shared.SharedPort,
        settings: CleanupSettings,
        node: str,
        now: Callable[[], datetime.datetime] = _utcnow,
    ) -> None:
        self._client = client
        self._state = device_state
        self._domains = domains
        self._shared = shared_imex
        self._s = settings
        self._node = node
        self._now = now
        self._extra = {"node": node}

    async def run(self) -> None:
        """Run a pass now and then every interval, until cancelled."""
        while True:
            await self.run_once()
            await asyncio.sleep(self._s.interval_s)

    async def run_once(self) -> None:
        """One pass over every step; failures are logged, never raised."""
        steps: tuple[tuple[str, Callable[[], Awaitable[None]]], ...] = (
            ("stale claims", self._stale_claims),
            ("tombstones", self._expire_tombstones),
            ("orphaned CDI specs", self._orphan_specs),
            ("stray node label", self._stray_label),
            ("stray channel annotations", self._stray_channels),
            ("per-CD folders", self._domain_dirs),
        )
        for what, step in steps:
            try:
                await step()
            except _FAILURES as err:  # non-fatal: the next pass tries again
                logger.warning("cleanup of %s failed: %s", what, err, extra=self._extra)

    async def _snapshot(self) -> checkpoint.Checkpoint:
        async with self._state.transaction() as txn:
            return txn.current

    async def _stale_claims(self) -> None:
        for uid, entry in (await self._snapshot()).claims.items():
            if not entry.state.live or not entry.name:
                continue
            ref = f"{entry.namespace}/{entry.name}"
            try:
                async with asyncio.timeout(self._s.claim_get_timeout_s):
                    with kube.translated(f"checking claim {ref}"):
                        found = await self._client.get(
                            ResourceClaim, entry.name, namespace=entry.namespace
                        )
                current_uid = found.metadata.uid if found.metadata else None
            except kube.NotFound:
                current_uid = None
            except kube.KubeError as err:
                logger.warning("%s", err, extra=self._extra)
                continue
            except TimeoutError as err:
                logger.warning("checking claim %s: %s", ref, err, extra=self._extra)
                continue
            if current_uid == uid:
                if entry.state is not checkpoint.ClaimState.PREPARE_COMPLETED:
                    logger.info("partially prepared claim not stale: %s", ref, extra=self._extra)
                continue

            def unchanged(e: checkpoint.ClaimEntry, seen: checkpoint.ClaimEntry = entry) -> bool:
                return e.state is seen.state and e.updated_at == seen.updated_at

            if await self._state.unprepare(uid, only_if=unchanged) is not None:
                logger.info(
                    "Checkpointed RC cleanup: unprepared stale claim: %s (%s, was %s)",
                    ref,
                    uid,
                    entry.state.value,
                    extra=self._extra,
                )

    async def _expire_tombstones(self) -> None:
        limit = self._now() - datetime.timedelta(seconds=self._s.tombstone_ttl_s)
        async with self._state.transaction() as txn:
            expired = [
                uid
                for uid, e in txn.current.claims.items()
                if not e.state.live and e.updated_at < limit
            ]
            if not expired:
                return
            cp = txn.current
            for uid in expired:
                cp = cp.without_claim(uid)
            await txn.save(cp)

    async def _orphan_specs(self) -> None:
        async with self._state.transaction() as txn:
            live = {uid for uid, e in txn.current.claims.items() if e.state.live}
            writer = self._state.writer
            for uid in await asyncio.to_thread(writer.claim_uids):
                if uid not in live:
                    await asyncio.to_thread(writer.remove_claim_spec, uid)
                    logger.info("removed orphaned CDI spec of claim %s", uid, extra=self._extra)

    async def _stray_label(self) -> None:
        async with self._state.transaction() as txn:
            label = await self._domains.label_value()
            if label and label not in holder.claims_by_holder(txn.current):
                await self._domains.unlabel(label)
                logger.info(
                    "removed node label of ComputeDomain %s: no claim on this node needs it",
                    label,
                    extra=self._extra,
                )

    async def _stray_channels(self) -> None:
        async with self._state.transaction() as txn:
            live = holder.claims_by_domain(txn.current, sharedimex.Scope.PER_CLIQUE)
            for domain_uid in sorted(await self._shared.node_channels()):
                if domain_uid not in live:
                    await self._shared.detach(domain_uid)  # it logs what it removed

    async def _domain_dirs(self) -> None:
        cp = await self._snapshot()
        used = holder.domains_in_use(cp)
        root = self._state.domain_dir("")
        found = await asyncio.to_thread(
            lambda: [p.name for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
        )
        for domain_uid in found:
            if domain_uid == SHARED_IMEX_DIR:
                continue  # the resident agent's, not a CD's
            if domain_uid in used or await self._domains.find(domain_uid) is not None:
                continue
            await asyncio.to_thread(shutil.rmtree, root / domain_uid, True)
            logger.info("removed folder of deleted ComputeDomain %s", domain_uid, extra=self._extra)
