"""Readiness: our pod's label and our pod's Ready condition (what the probe asks is ``health``).

* :func:`label_pod` sets ``resource.nvidia.com/computeDomain.cliqueID=<cliqueID>`` on our pod (a
  merge patch; the value may be empty), which tells the controller fabric and non-fabric daemon
  pods apart.
* :class:`PodReadiness` follows our own pod by watch and reports Ready when the pod is
  ``Running`` and its ``Ready`` condition is ``True`` (the kubelet's probe got a yes from
  ``health``) while this daemon's own IMEX check says READY (a condition can predate our
  container); the membership writes that into our clique entry, where the kubelet plugin's
  channel prepare waits for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from compute_domains.api import names
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import kubeio
from compute_domains.daemon.config import Identity
from compute_domains.infra import backoff, errors
from compute_domains.infra.kube import informers

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
    """Our entry's readiness: the pod's Ready condition, while this daemon sees its IMEX READY.

    A pod's ``Ready`` condition can predate the container we run in: after a fast reboot (or a
    kubelet that has not yet published the new container's state) the API still shows the
    earlier container's ``Ready=True``. Trusting it would report an IMEX daemon Ready that has
    not started. So the condition counts only while this process's own check (``health``) says
    READY; the kubelet's probe asks that same check, so the two agree but for the probe's delay.
    """

    own_check: bool = True
    """False: no own check exists (trust the condition at once)."""
    pod: Readiness = Readiness.NOT_READY
    own_ok: bool = False
    """The latest verdict of our own IMEX check."""

    def effective(self) -> Readiness:
        """What the entry says now."""
        if self.pod is Readiness.READY and (self.own_ok or not self.own_check):
            return Readiness.READY
        return Readiness.NOT_READY


class PodReadiness:
    """Follows our pod and calls ``on_change`` with our entry's readiness when that changes.

    With ``own_check``, the pod's condition counts only while :meth:`set_own` last said True
    (see :class:`OwnCheckGate`).
    """

    def __init__(
        self,
        client: AsyncClient,
        ident: Identity,
        *,
        on_change: Callable[[Readiness], None],
        retry: backoff.Backoff,
        own_check: bool = False,
        shared: informers.Informers | None = None,
    ) -> None:
        self._client = client
        self._shared = shared
        self._ident = ident
        self._on_change = on_change
        self._retry = retry
        self._gate = OwnCheckGate(own_check=own_check)
        self._last: Readiness | None = None

    @property
    def pod_says(self) -> Readiness:
        """What our pod's condition said last (before the own check's gate)."""
        return self._gate.pod

    def set_own(self, ok: bool) -> None:
        """Our own IMEX check's verdict changed."""
        self._gate.own_ok = ok
        self._emit()

    async def run(self) -> None:
        """Watch until cancelled."""
        async for pod in kubeio.follow(
            self._client,
            Pod,
            self._ident.pod_name,
            namespace=self._ident.pod_namespace,
            retry=self._retry,
            shared=self._shared,
        ):
            if pod is not None and pod.metadata.uid != self._ident.pod_uid:
                continue  # a namesake pod (StatefulSet-style reuse of the name): not us
            self._gate.pod = readiness_of(pod)
            self._emit()

    def _emit(self) -> None:
        value = self._gate.effective()
        if value is not self._last:
            self._last = value
            logger.info("our pod is %s", value.value, extra={"pod": self._ident.pod_name})
            self._on_change(value)
