"""Lease-based leader election (``coordination.k8s.io/v1``), client-go's algorithm in asyncio.

A candidate tries every ``retry_period_s`` to take the Lease. It may take it when nobody holds
it, when it holds it already, or when the record has not changed for ``lease_duration_s`` as
measured on the candidate's own clock since it last saw a change (so clock skew between
replicas does not matter). Writes carry the read resourceVersion: of two candidates racing,
exactly one wins. The leader renews every ``retry_period_s``; if no renewal succeeded for
``renew_deadline_s`` it stops leading (its work is cancelled) and becomes a candidate again,
with fresh state. On a graceful stop it clears the holder (``release_on_cancel``), so a standby
takes over at once instead of after the lease duration.

Decision logic (``may_acquire``) is a pure function, unit-tested without a server.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any

from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from compute_domains.controller import config, kubeapi
from compute_domains.infra import errors

logger = logging.getLogger(__name__)


class LeadershipLost(errors.ComputeDomainsError):
    """The leader could not renew its Lease in time and must stop leading."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Record:
    """The parts of a Lease that tell whether it changed."""

    holder: str
    renew_time: str
    transitions: int


def may_acquire(
    record: Record | None, *, me: str, observed_at: float, now: float, duration: float
) -> bool:
    """Whether ``me`` may take (or keep) the Lease whose current record is ``record``.

    ``observed_at`` is when (on our clock) we first saw this exact record.
    """
    if record is None or not record.holder or record.holder == me:
        return True
    return now - observed_at >= duration


class LeaderElector:
    """Campaigns for a Lease and runs the leader's work while it holds it."""

    def __init__(
        self,
        api: kubeapi.Api,
        settings: config.LeaderElectionSettings,
        *,
        namespace: str,
        identity: str,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self._api = api
        self._s = settings
        self._namespace = namespace
        self.identity = identity
        self._on_change = on_change
        self._record: Record | None = None
        self._observed_at = 0.0
        self._leading = False

    @property
    def leading(self) -> bool:
        """Whether this instance holds the Lease right now."""
        return self._leading

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Campaign and lead, again after every lost term, until cancelled."""
        try:
            while True:
                await self._acquire()
                self._set_leading(True)
                logger.info("became leader (lease %s/%s)", self._namespace, self._s.lease_name)
                try:
                    async with asyncio.TaskGroup() as tg:
                        tg.create_task(lead(), name="leader-work")
                        tg.create_task(self._keep_renewed(), name="lease-renew")
                except* LeadershipLost:
                    logger.warning("lost leadership; stopping work and campaigning again")
                finally:
                    self._set_leading(False)
        finally:
            if self._s.release_on_cancel and self._record and self._record.holder == self.identity:
                await asyncio.shield(self._release())

    def _set_leading(self, value: bool) -> None:
        self._leading = value
        if self._on_change is not None:
            self._on_change(value)

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _jittered(self, period: float) -> float:
        return period * random.uniform(1.0, 1.2)

    async def _acquire(self) -> None:
        while True:
            try:
                if await self._try_acquire_or_renew():
                    return
            except errors.ComputeDomainsError as err:
                logger.debug("lease %s: %s", self._s.lease_name, err)
            await asyncio.sleep(self._jittered(self._s.retry_period_s))

    async def _keep_renewed(self) -> None:
        last = self._now()
        while True:
            await asyncio.sleep(self._s.retry_period_s)
            try:
                if await self._try_acquire_or_renew():
                    last = self._now()
                    continue
                raise LeadershipLost(f"lease {self._s.lease_name} taken by {self._record}")
            except errors.TemporaryError as err:
                logger.warning("renewing lease %s failed: %s", self._s.lease_name, err)
            if self._now() - last > self._s.renew_deadline_s:
                raise LeadershipLost(f"could not renew lease for {self._s.renew_deadline_s}s")

    def _observe(self, lease: Any) -> Record:
        spec = lease.spec
        record = Record(
            holder=spec.holderIdentity or "",
            renew_time=str(spec.renewTime or ""),
            transitions=spec.leaseTransitions or 0,
        )
        if record != self._record:
            self._record = record
            self._observed_at = self._now()
        return record

    async def _try_acquire_or_renew(self) -> bool:
        now = kubeapi.now()
        duration = int(self._s.lease_duration_s)
        lease: Any = await self._api.get(Lease, self._s.lease_name, namespace=self._namespace)
        if lease is None:
            spec = LeaseSpec(
                holderIdentity=self.identity,
                leaseDurationSeconds=duration,
                acquireTime=now,
                renewTime=now,
                leaseTransitions=0,
            )
            meta = ObjectMeta(name=self._s.lease_name, namespace=self._namespace)
            try:
                lease = await self._api.create(Lease(metadata=meta, spec=spec))
            except kubeapi.AlreadyExists:
                return False
            self._observe(lease)
            return True
        record = self._observe(lease)
        if not may_acquire(
            record,
            me=self.identity,
            observed_at=self._observed_at,
            now=self._now(),
            duration=self._s.lease_duration_s,
        ):
            return False
        spec = lease.spec
        taking_over = (spec.holderIdentity or "") != self.identity
        spec.holderIdentity = self.identity
        spec.leaseDurationSeconds = duration
        spec.renewTime = now
        if taking_over:
            spec.acquireTime = now
            spec.leaseTransitions = (spec.leaseTransitions or 0) + (1 if record.holder else 0)
        try:
            lease = await self._api.replace(lease)
        except kubeapi.Conflict:
            return False
        self._observe(lease)
        return True

    async def _release(self) -> None:
        with contextlib.suppress(errors.ComputeDomainsError, TimeoutError):
            async with asyncio.timeout(5.0):
                lease: Any = await self._api.get(
                    Lease, self._s.lease_name, namespace=self._namespace
                )
                if lease is None or lease.spec.holderIdentity != self.identity:
                    return
                lease.spec.holderIdentity = None
                lease.spec.leaseDurationSeconds = 1
                lease.spec.renewTime = kubeapi.now()
                await self._api.replace(lease)
                logger.info("released lease %s/%s", self._namespace, self._s.lease_name)
