"""Readiness: our pod's label and our pod's Ready condition (the probe itself is ``probe``).

* :func:`label_pod` sets ``resource.nvidia.com/computeDomain.cliqueID=<cliqueID>`` on our pod (a
  merge patch; the value may be empty), which tells the controller fabric and non-fabric daemon
  pods apart.
* :class:`PodReadiness` follows our own pod by watch and reports Ready when the pod is
  ``Running`` and its ``Ready`` condition is ``True``, i.e. when ``probe.check`` passed, and
  this daemon's own ``probe.check`` passed once too (a condition can predate our container); the
  membership writes that into our clique entry, where the kubelet plugin's channel prepare
  waits for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from compute_domains.api import names
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import kubeio, probe
from compute_domains.daemon.config import Identity
from compute_domains.infra import backoff, errors

logger = logging.getLogger(__name__)


def is_pod_ready(pod: Any) -> bool:
    """Phase ``Running`` and condition ``Ready`` ``True`` (upstream's definition)."""
    status = getattr(pod, "status", None)
    if status is None or status.phase != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])


def readiness_of(pod: Any | None) -> Readiness:
    """Our entry's status for the pod's state (a missing pod is NotReady)."""
    return Readiness.READY if pod is not None and is_pod_ready(pod) else Readiness.NOT_READY


async def label_pod(
    client: AsyncClient,
    ident: Identity,
    *,
    retry: backoff.Backoff,
    deadline: float = 30.0,
    rng: random.Random | None = None,
) -> dict[str, str] | None:
    """Label our pod with its clique ID; temporary failures are retried until ``deadline``.

    Returns our pod's controller (the per-CD DaemonSet) as an owner reference (apiVersion,
    kind, name, uid), or None when the pod has none (a hand-made pod).

    Raises:
        PermanentError: the patch was refused (RBAC, pod gone).
        TemporaryError: it kept failing for ``deadline`` seconds.
    """
    body = {"metadata": {"labels": {names.CLIQUE_ID_LABEL: ident.clique_id}}}
    attempt = 0
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline
    while True:
        try:
            pod = await client.patch(
                Pod, ident.pod_name, body, namespace=ident.pod_namespace, patch_type=PatchType.MERGE
            )
            refs = (pod.metadata.ownerReferences if pod.metadata else None) or []
            for ref in refs:
                if ref.controller:
                    return {
                        "apiVersion": ref.apiVersion,
                        "kind": ref.kind,
                        "name": ref.name,
                        "uid": ref.uid,
                    }
            return None
        except (httpx.HTTPError, OSError) as err:
            what = f"label pod {ident.pod_namespace}/{ident.pod_name}"
            classified = kubeio.classify(err, what)
            delay = retry.delay(attempt, rng)
            if isinstance(classified, errors.PermanentError) or loop.time() + delay > until:
                raise classified from err
            logger.info("%s; retrying in %.2fs", classified, delay)
            attempt += 1
            await asyncio.sleep(delay)


@dataclasses.dataclass(slots=True)
class OwnCheckGate:
    """Our entry's readiness: the pod's Ready condition, once this daemon saw its own IMEX ready.

    A pod's ``Ready`` condition can predate the container we run in: after a fast reboot (or a
    kubelet that has not yet published the new container's state) the API still shows the
    earlier container's ``Ready=True``. Trusting it would report an IMEX daemon Ready that has
    not started. So the condition counts only after this process's own check passed once;
    from then on the kubelet's probe is the authority, as upstream has it.
    """

    own_check: bool = True
    """False: no own check exists (trust the condition at once)."""
    pod: Readiness = Readiness.NOT_READY
    confirmed: bool = False

    def effective(self) -> Readiness:
        """What the entry says now."""
        if self.pod is Readiness.READY and (self.confirmed or not self.own_check):
            return Readiness.READY
        return Readiness.NOT_READY

    def wants_check(self) -> bool:
        """The pod claims Ready and we have not yet seen it ourselves."""
        return self.own_check and self.pod is Readiness.READY and not self.confirmed


class PodReadiness:
    """Follows our pod and calls ``on_change`` with our entry's readiness when that changes.

    ``own_check`` is this daemon's own IMEX check (see :class:`OwnCheckGate`); while the pod
    says Ready and the check has not passed yet, it is retried every ``check_interval`` s.
    """

    def __init__(
        self,
        client: AsyncClient,
        ident: Identity,
        *,
        on_change: Callable[[Readiness], None],
        retry: backoff.Backoff,
        own_check: Callable[[], Awaitable[probe.CheckResult]] | None = None,
        check_interval: float = 1.0,
    ) -> None:
        self._client = client
        self._ident = ident
        self._on_change = on_change
        self._retry = retry
        self._own_check = own_check
        self._interval = check_interval
        self._gate = OwnCheckGate(own_check=own_check is not None)
        self._last: Readiness | None = None

    async def run(self) -> None:
        """Watch until cancelled."""
        checker: asyncio.Task[None] | None = None
        try:
            async for pod in kubeio.follow(
                self._client,
                Pod,
                self._ident.pod_name,
                namespace=self._ident.pod_namespace,
                retry=self._retry,
            ):
                if pod is not None and pod.metadata.uid != self._ident.pod_uid:
                    continue  # a namesake pod (StatefulSet-style reuse of the name): not us
                self._gate.pod = readiness_of(pod)
                if self._gate.wants_check() and (checker is None or checker.done()):
                    checker = asyncio.create_task(self._confirm(), name="own-imex-check")
                self._emit()
        finally:
            if checker is not None:
                checker.cancel()
                await asyncio.gather(checker, return_exceptions=True)

    async def _confirm(self) -> None:
        assert self._own_check is not None
        logger.info("our pod says Ready; waiting for our own IMEX check to pass too")
        while self._gate.wants_check():
            result = await self._own_check()
            if result.ok:
                self._gate.confirmed = True
                self._emit()
                return
            await asyncio.sleep(self._interval)

    def _emit(self) -> None:
        value = self._gate.effective()
        if value is not self._last:
            self._last = value
            logger.info("our pod is %s", value.value, extra={"pod": self._ident.pod_name})
            self._on_change(value)
