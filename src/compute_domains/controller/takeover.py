"""Taking over the daemon DaemonSet of a ComputeDomain that NVIDIA's controller formed.

After a switch from NVIDIA's chart (docs/upgrade.md), a domain NVIDIA formed still has NVIDIA's
DaemonSet ``computedomain-daemon-<cdUID>``: same name, selector and claim template as ours, but
its pod template runs NVIDIA's ``compute-domain-daemon``, which needs files only NVIDIA's plugin
writes, so every pod it starts on a node that joins later fails. The controller replaces it
without restarting a running daemon (docs/decisions/0021):

1. :func:`is_nvidias` recognises NVIDIA's template (its container runs ``compute-domain-daemon``);
2. the controller deletes that DaemonSet with orphan propagation (its running pods stay, the
   garbage collector removes their owner reference) and drops the finalizer both drivers put on
   it, so it goes at once;
3. the next pass creates ours under the same name. Its selector is the CD's label, which the
   orphans carry, so the DaemonSet controller adopts them; :func:`keep_running` gives it the
   ``OnDelete`` update strategy while any of NVIDIA's pods is among them, so they are never
   replaced: each runs until its node leaves the domain, and a node that joins gets ours.

NVIDIA's daemons and ours share one IMEX domain: both label their pod with the clique ID (our
controller then keeps the index of an existing entry) and read the same clique object, and
:func:`keep_running` sets our daemons to NVIDIA's peer names, so both write the same DNS-name
node map (``compute-domain-daemon-%04d``; ours are otherwise unique per domain, decision 0016).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from lightkube.models.apps_v1 import DaemonSetUpdateStrategy
from lightkube.models.core_v1 import EnvVar
from lightkube.resources.apps_v1 import DaemonSet

from compute_domains.api import names
from compute_domains.controller import kubeapi

NVIDIA_DAEMON_PROGRAM: Final = "compute-domain-daemon"
"""What the daemon container of NVIDIA's DaemonSet runs (``command[0]``)."""
ON_DELETE: Final = "OnDelete"
PEER_NAMES_ENV: Final = "IMEX_PEER_NAMES"
"""The daemon's setting of its IMEX peer names (``cdctl daemon run --imex-peer-names``)."""


def _runs_nvidias_daemon(pod_spec: Any) -> bool:
    containers = getattr(pod_spec, "containers", None) or []
    return any((c.command or [""])[0] == NVIDIA_DAEMON_PROGRAM for c in containers)


def is_nvidias(ds: DaemonSet) -> bool:
    """Whether a stored daemon DaemonSet is NVIDIA's (its pods run NVIDIA's daemon)."""
    spec = ds.spec
    return spec is not None and _runs_nvidias_daemon(spec.template.spec)


def nvidias_pods(pods: Iterable[Any]) -> list[str]:
    """Names of the daemon pods among ``pods`` that run NVIDIA's daemon and still live."""
    return [
        p.metadata.name or ""
        for p in pods
        if p.metadata is not None
        and p.metadata.deletionTimestamp is None
        and _runs_nvidias_daemon(p.spec)
    ]


def keep_running(ds: DaemonSet) -> DaemonSet:
    """``ds`` with the ``OnDelete`` update strategy (adopted pods of another template stay) and
    its daemons set to NVIDIA's peer names (``IMEX_PEER_NAMES=nvidia``), so that their IMEX
    joins the domain of NVIDIA's running daemons, whose node map lists those names."""
    assert ds.spec is not None and ds.spec.template.spec is not None
    ds.spec.updateStrategy = DaemonSetUpdateStrategy(type=ON_DELETE)
    for container in ds.spec.template.spec.containers:
        container.env = [*(container.env or []), EnvVar(name=PEER_NAMES_ENV, value="nvidia")]
    return ds


async def release(api: kubeapi.Api, ds: DaemonSet) -> None:
    """Delete NVIDIA's DaemonSet ``ds`` and leave its pods running (step 2 above)."""
    meta = ds.metadata
    assert meta is not None and meta.name is not None
    await api.delete(DaemonSet, meta.name, namespace=meta.namespace, orphan=True)
    # NVIDIA's controller put the same finalizer on it as ours does; nobody else removes it.
    await api.remove_finalizer(DaemonSet, meta.name, names.FINALIZER, namespace=meta.namespace)
