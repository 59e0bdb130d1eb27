"""Readiness: the ``check`` probe (IMEX says READY), our pod's label, and our pod's Ready condition.

* :func:`check` is what every probe of the daemon container runs. With no clique ID it passes at
  once (no IMEX on this node). Otherwise it runs ``nvidia-imex-ctl -c <cfg> -q``, which asks the
  *local* IMEX daemon once, and passes only when the combined output is exactly ``READY\\n``. A
  ctl that hangs (a wedged daemon) fails after ``timeout`` and is killed. It never looks at the
  rest of the domain: a workload is released as soon as its local daemon is up.
* :func:`label_pod` sets ``resource.nvidia.com/computeDomain.cliqueID=<cliqueID>`` on our pod (a
  merge patch; the value may be empty), which tells the controller fabric and non-fabric daemon
  pods apart.
* :class:`PodReadiness` follows our own pod by watch and reports Ready exactly when the pod is
  ``Running`` and its ``Ready`` condition is ``True``, i.e. when ``check`` passed; the membership
  writes that into our clique entry, where the kubelet plugin's channel prepare waits for it.
"""

from __future__ import annotations

import asyncio
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
from compute_domains.daemon import kubeio, probe
from compute_domains.daemon.config import Identity
from compute_domains.infra import backoff, errors

logger = logging.getLogger(__name__)

# The probe itself lives in a light module (it runs every second); re-exported here.
READY_OUTPUT = probe.READY_OUTPUT
CheckResult = probe.CheckResult
check = probe.check


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
                    return {"apiVersion": ref.apiVersion, "kind": ref.kind, "name": ref.name,
                            "uid": ref.uid}
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


class PodReadiness:
    """Follows our pod and calls ``on_change`` with its readiness whenever that changes."""

    def __init__(
        self,
        client: AsyncClient,
        ident: Identity,
        *,
        on_change: Callable[[Readiness], None],
        retry: backoff.Backoff,
    ) -> None:
        self._client = client
        self._ident = ident
        self._on_change = on_change
        self._retry = retry
        self._last: Readiness | None = None

    async def run(self) -> None:
        """Watch until cancelled."""
        async for pod in kubeio.follow(
            self._client,
            Pod,
            self._ident.pod_name,
            namespace=self._ident.pod_namespace,
            retry=self._retry,
        ):
            if pod is not None and pod.metadata.uid != self._ident.pod_uid:
                continue  # a namesake pod (StatefulSet-style reuse of the name): not us
            value = readiness_of(pod)
            if value is not self._last:
                self._last = value
                logger.info("our pod is %s", value.value, extra={"pod": self._ident.pod_name})
                self._on_change(value)
