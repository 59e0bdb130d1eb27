"""DeviceState: the idempotent prepare/unprepare state machine over the node's checkpoint.

The checkpoint (``checkpoint.json`` in our plugin folder) is the only record of what this node
prepared; its opening at start, the transactions over it (under the node's two locks) and the
holder it implies are ``transactions``' (``Transactions``, the base class of ``DeviceState``).

Claim states: absent → ``PrepareStarted`` → ``PrepareCompleted`` → ``UnprepareCompleted``
(a tombstone); a permanent failure records ``PrepareAborted``. Prepare of a channel claim runs in
three steps: (1) in a transaction: look up the CD and its scope (``scope``), refuse what the
node's holder and scope forbid (``holder``), record ``PrepareStarted`` with the planned devices
and the scope (and so the node's holder), then mark the node: per-domain, the CD's node label;
per-clique (issue 26), the CD's channel from the clique's shared registry and the Node's
channel annotation and shared-IMEX label (``shared``); (2) without any lock: wait until the
node's IMEX is Ready (the CD's daemon, or the clique's shared IMEX: followed from the moment
step 1 knows the CD is per clique, so its reads overlap step 1's writes); (3) in a transaction: if
the claim was not unprepared meanwhile, write its files (``claimfiles``: CDI spec, per-CD or
shared folder) and record ``PrepareCompleted``; the claims that reach step 3 while the node is
busy complete together, in the first of their transactions (``completions``: one thread writes
their files, one save records them). Daemon claims need no wait.

Invariants:
- Prepare of a ``PrepareCompleted`` claim returns the stored devices without new checks.
- A prepare of a claim version (same UID and resourceVersion) that was already unprepared is
  refused permanently: it is a late retry that would otherwise leak the label and CDI spec.
- The node label of per-domain CD ``X`` exists only while ``X`` is the node's holder
  (``holder``: a live per-domain entry holds a channel device of ``X``): it is written after
  the entry, and unprepare removes it when the last such entry goes (reference count per CD,
  beyond upstream's one claim per node). Likewise the Node's channel annotation of per-clique
  CD ``X`` exists only while a live per-clique entry of ``X`` does; the shared-IMEX label stays
  after the last one (``eager`` alone removes it, at start).
- Two live claims never hold the same (non admin-access) device; a node never serves two
  per-domain CDs, nor a per-domain and a per-clique CD at once (several per-clique CDs, yes).
- The per-CD folder ``domains/<domain UID>`` (IMEX config the daemon writes, workloads read)
  exists only while a live entry holds a device of that CD, or while the Node is warm for that
  CD (its ``compute-domains/warm-for`` label: a resident agent serves the CD there with no claim
  and keeps its IMEX config in that folder): prepare creates it, and the unprepare of the last
  such entry on a node not warm for the CD removes it, under the locks, so a concurrent prepare
  of the same CD either counts as a holder or creates it again afterwards (cleanup's sweep is
  only a safety net).
- Unprepare of an unknown or already unprepared claim succeeds and changes nothing.

Size: one state machine (with the warm-spare hold, issue 16, and the per-clique scope, issue
26); prepare and unprepare are its transitions and would not read apart. Its parts elsewhere:
the locked transaction they share, with its hand-over (issue 28), ``transactions``; its pure
parts ``holder``, ``scope``, ``edits``, ``configs``; its file writes ``claimfiles`` and
``checkpointfile``; step 3 done together ``completions``; its API calls ``computedomain`` and
``shared``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import functools
import logging
from collections.abc import Callable
from pathlib import Path

from compute_domains.api import sharedimex
from compute_domains.api.computedomain import ComputeDomain
from compute_domains.infra import errors
from compute_domains.plugin import (
    cdi,
    checkpoint,
    claimfiles,
    completions,
    computedomain,
    configs,
    devices,
    edits,
    holder,
    scope,
    shared,
    transactions,
)
from compute_domains.plugin.config import PathSettings, RetrySettings

logger = logging.getLogger(__name__)

State = checkpoint.ClaimState
Transaction = transactions.Transaction
LOCK_FILE = transactions.LOCK_FILE
"""Name of the node-local lock file in the plugin folder."""


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclasses.dataclass(frozen=True, slots=True)
class _Begun:
    """What step 1 of a prepare found: the plan, the CD, and (per-clique) its channel here."""

    plan: configs.Plan
    cd: ComputeDomain
    channel: int | None = None


class DeviceState(transactions.Transactions):
    """Owns the checkpoint, the claim CDI specs and the per-CD folders of one node."""

    def __init__(
        self,
        *,
        node: str,
        paths: PathSettings,
        retry: RetrySettings,
        facts: edits.NodeFacts,
        domains: computedomain.DomainPort,
        shared_imex: shared.SharedPort,
        channel_slots: int,
        on_holder_change: Callable[[str], None] = lambda _holder: None,
        on_checkpoint: Callable[[checkpoint.Checkpoint], None] = lambda _cp: None,
        now: Callable[[], datetime.datetime] = _utcnow,
    ) -> None:
        super().__init__(
            node=node,
            plugin_dir=paths.local(paths.plugin_dir),
            retry=retry,
            writer=cdi.CdiWriter(paths.local(paths.cdi_root)),
            offered=devices.allocatable(channel_slots),
            now=now,
            on_holder_change=on_holder_change,
            on_checkpoint=on_checkpoint,
        )
        self._paths = paths
        self._facts = facts
        self._domains = domains
        self._shared = shared_imex
        self._completing = completions.Queue()
        """Prepares at step 3 not yet taken into a transaction (``_complete``)."""

    async def prepare(
        self, claim: configs.Claim, *, wait_s: float
    ) -> tuple[checkpoint.PreparedDevice, ...]:
        """One attempt to prepare ``claim``; ``wait_s`` bounds the readiness wait.

        Raises:
            errors.PermanentError: retrying cannot help (bad config, wrong namespace, ...).
            errors.TemporaryError: retrying may help (daemon not Ready, conflict, lock).
        """
        async with contextlib.AsyncExitStack() as following:
            return await self._prepare(claim, wait_s, following)

    async def _prepare(
        self, claim: configs.Claim, wait_s: float, following: contextlib.AsyncExitStack
    ) -> tuple[checkpoint.PreparedDevice, ...]:
        """``prepare``; ``following`` holds the per-clique followers open until it returns."""
        async with self.transaction() as txn:
            entry = txn.current.get(claim.uid)
            if entry is not None and entry.state is State.PREPARE_COMPLETED:
                return entry.devices
            if (
                entry is not None
                and entry.state is State.UNPREPARED
                and entry.resource_version == claim.resource_version
            ):
                raise errors.PermanentError(
                    f"claim {claim.ref} was unprepared at {entry.updated_at:%H:%M:%S}; refusing a "
                    "late prepare of the same claim version"
                )
            now = self._now()
            live = entry is not None and entry.state.live
            base = checkpoint.ClaimEntry(
                uid=claim.uid,
                namespace=claim.namespace,
                name=claim.name,
                state=State.PREPARE_STARTED,
                started_at=entry.started_at if live and entry else now,
                updated_at=now,
                devices=entry.devices if live and entry else (),
                status=claim.status,
                resource_version=claim.resource_version,
            )
            try:
                begun = await self._begin(txn, claim, base, following)
            except errors.PermanentError:
                # Recorded so that the failure is visible and the cleanup can judge the claim.
                recorded = txn.current.get(claim.uid) or base
                aborted = dataclasses.replace(recorded, state=State.PREPARE_ABORTED)
                await txn.save(txn.current.with_claim(aborted))
                raise
        plan, cd, wait = begun.plan, begun.cd, max(wait_s, 0.1)
        if begun.channel is not None:
            await self._shared.wait_ready(cd, self._facts.clique_id, wait)
        elif plan.has_channels:
            await self._domains.wait_ready(cd, self._facts.clique_id, wait)
        return await self._complete(claim, begun)

    async def _complete(
        self, claim: configs.Claim, begun: _Begun
    ) -> tuple[checkpoint.PreparedDevice, ...]:
        """Step 3, together with the node's other prepares queued for it (``completions``)."""
        write = functools.partial(
            claimfiles.write,
            claim.uid,
            begun.plan,
            begun.cd,
            paths=self._paths,
            facts=self._facts,
            writer=self.writer,
            channel=begun.channel,
        )
        mine = completions.Completion(claim.uid, claim.ref, write)
        self._completing.add(mine)
        try:
            async with self.transaction() as txn:
                await completions.complete(
                    txn.current, self._completing.take(), txn.save, self._now()
                )
        except BaseException:
            self._completing.drop(mine)  # this attempt failed: the driver retries it
            raise
        return await mine.done

    async def _begin(
        self,
        txn: Transaction,
        claim: configs.Claim,
        base: checkpoint.ClaimEntry,
        following: contextlib.AsyncExitStack,
    ) -> _Begun:
        """Step 1 under the locks: plan, CD lookup, scope and holder checks, record, mark.

        A per-clique claim opens the clique's followers (``shared.SharedPort.following``) in
        ``following`` as soon as its scope is checked: their reads and watches then run while
        this step writes, and step 2's wait and the allocation here read from them."""
        plan = configs.plan(claim, node=self._node, offered=self._offered)
        self._check_overlap(txn.current, claim, plan)
        planned = dataclasses.replace(base, devices=edits.planned_devices(plan))
        if not plan.has_channels:
            cd = await self._domains.for_daemon(plan.domain_uid)
            await txn.save(txn.current.with_claim(planned))
            return _Begun(plan, cd)
        cd = await self._domains.for_channel(plan.domain_uid, claim.namespace)
        claim_scope = scope.of(cd)
        clique_id = self._facts.clique_id
        if claim_scope is sharedimex.Scope.PER_CLIQUE:
            scope.check_per_clique(plan, cd, node=self._node, clique_id=clique_id)
            await following.enter_async_context(self._shared.following(clique_id))
        holder.check_free_for(
            txn.current,
            node=self._node,
            domain_uid=plan.domain_uid,
            claim=claim.uid,
            scope=claim_scope,
            labels=self._labels,
        )
        await txn.save(txn.current.with_claim(dataclasses.replace(planned, scope=claim_scope)))
        if claim_scope is sharedimex.Scope.PER_DOMAIN:
            await self._domains.label(cd)
            return _Begun(plan, cd)
        channel = await self._shared.allocate(clique_id, cd)
        await self._shared.attach(cd, channel)
        self.shared_label_written()
        return _Begun(plan, cd, channel)

    def _check_overlap(
        self, cp: checkpoint.Checkpoint, claim: configs.Claim, plan: configs.Plan
    ) -> None:
        wanted = plan.device_names()
        for uid, other in cp.claims.items():
            if uid == claim.uid or other.state is not State.PREPARE_COMPLETED:
                continue
            for device in other.devices:
                if device.device_name in wanted:
                    raise errors.TemporaryError(
                        f"requested device {device.device_name} is already allocated to "
                        f"different claim {other.namespace}/{other.name} ({uid})"
                    )

    async def unprepare(
        self, uid: str, *, only_if: Callable[[checkpoint.ClaimEntry], bool] | None = None
    ) -> checkpoint.ClaimEntry | None:
        """Undo a claim's side effects and leave a tombstone; the entry undone, or None (no-op).

        Args:
            uid: the claim UID.
            only_if: undo only when this holds for the current entry (cleanup's re-check).

        Raises:
            errors.TemporaryError: the node label or channel annotation could not be removed
                (retryable).
        """
        async with self.transaction() as txn:
            entry = txn.current.get(uid)
            if (
                entry is None
                or not entry.state.live
                or (only_if is not None and not only_if(entry))
            ):
                return None
            others = holder.claims_by_domain(txn.current, entry.scope, exclude=uid)
            for device in entry.devices:
                held_by = device.domain_uid
                if device.kind == devices.DeviceType.CHANNEL and held_by and held_by not in others:
                    if entry.scope is sharedimex.Scope.PER_CLIQUE:
                        await self._shared.detach(held_by)  # the shared-IMEX label stays
                    else:
                        await self._domains.unlabel(held_by)
                    others[held_by] = set()  # once per CD
            await asyncio.to_thread(self.writer.remove_claim_spec, uid)
            used = holder.domains_in_use(txn.current, exclude=uid, warm_for=self._labels.warm_for)
            for domain_uid in sorted({d.domain_uid for d in entry.devices if d.domain_uid} - used):
                if not await asyncio.to_thread(
                    claimfiles.remove_domain_dir, self._paths, domain_uid
                ):
                    continue  # never made (a channel claim on a node without a clique)
                logger.info(
                    "removed the folder of ComputeDomain %s: its last claim here was unprepared",
                    domain_uid,
                    extra={"claim_uid": uid, "node": self._node},
                )
            tombstone = dataclasses.replace(
                entry, state=State.UNPREPARED, devices=(), status={}, updated_at=self._now()
            )
            await txn.save(txn.current.with_claim(tombstone))
            # NVIDIA's wording (its verbosity 6); only a tombstone of the claim stays behind.
            logger.debug(
                "Deleted claim from checkpoint: %s/%s (a tombstone stays until cleanup expires it)",
                entry.namespace,
                entry.name,
                extra={"claim_uid": uid, "node": self._node},
            )
            return entry

    def domain_dir(self, domain_uid: str) -> Path:
        """Where this process finds the per-CD folder of ``domain_uid``."""
        return self._paths.local(self._paths.domains_dir / domain_uid)
