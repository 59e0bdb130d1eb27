"""``cdctl migrate prepare``: ready NVIDIA's release to be replaced by ours (docs/upgrade.md).

Before ``helm uninstall`` of NVIDIA's release, two things need doing that helm cannot do itself:

1. **Keep the daemons' ServiceAccount.** The domains' running IMEX daemons authenticate as
   ``compute-domain-daemon-service-account``. Their tokens name its UID, so the object itself
   must survive the uninstall: a new one of the same name does not help. Helm keeps an object
   only when its *recorded* manifest says ``helm.sh/resource-policy: keep``, so the release's
   record is changed to say so (``helmrelease.keep``). The live object is annotated with our
   release's name, so that our ``helm install`` takes it over (same object, same UID), and kept
   as well (``helm upgrade`` looks at the live object).
2. **Carry the values over.** The values the user gave NVIDIA's release (the record's
   ``config``) are returned as ``--set-json`` flags for our ``helm install``, except ``image.*``,
   which name NVIDIA's image.

Each step can be run again: a record that keeps the account already is left alone. Nothing here
deletes anything.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from typing import Any, Final

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Secret, ServiceAccount

from compute_domains.api import names
from compute_domains.infra import kube
from compute_domains.migrate import helmrelease

RELEASE_NAME_ANNOTATION: Final = "meta.helm.sh/release-name"
RELEASE_NAMESPACE_ANNOTATION: Final = "meta.helm.sh/release-namespace"
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
NOT_CARRIED: Final = ("image.",)
"""Value keys (prefixes) that name NVIDIA's own build, not a setting of the cluster."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PrepareSettings:
    """Which release to prepare, and the name of ours that takes over."""

    release: str = "nvidia-dra-driver-gpu"
    namespace: str = "nvidia-dra-driver-gpu"
    to_release: str = "compute-domains"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Prepared:
    """What ``prepare`` found and did."""

    revision: int
    account_uid: str
    record_changed: bool
    carried: tuple[tuple[str, Any], ...]
    left_out: tuple[tuple[str, Any], ...]

    def set_flags(self) -> str:
        """The carried values as ``helm install`` flags (shell-quoted ``--set-json``)."""
        return " ".join(
            f"--set-json {shlex.quote(f'{key}={json.dumps(value)}')}" for key, value in self.carried
        )


async def _record(client: AsyncClient, settings: PrepareSettings) -> Any:
    labels: Any = {"owner": "helm", "name": settings.release, "status": "deployed"}
    with kube.translated(f"list Secret {settings.namespace}"):
        found = [
            s
            async for s in client.list(Secret, namespace=settings.namespace, labels=labels)
            if s.type == helmrelease.SECRET_TYPE
        ]
    if len(found) != 1:
        raise helmrelease.ReleaseError(
            f"no deployed helm release {settings.release!r} in namespace {settings.namespace!r} "
            f"(found {len(found)} records; helm list -A shows where it is)"
        )
    return found[0]


async def prepare(client: AsyncClient, settings: PrepareSettings) -> Prepared:
    """Keep the daemons' ServiceAccount through NVIDIA's uninstall; read its values.

    Raises:
        helmrelease.ReleaseError: no such release, or its record lists no such account.
        kube.KubeError: a request failed (named in the message).
    """
    sa, ns = names.DAEMON_SERVICE_ACCOUNT, settings.namespace
    try:
        with kube.translated(f"get ServiceAccount {ns}/{sa}"):
            account = await client.get(ServiceAccount, sa, namespace=ns)
    except kube.NotFound:
        account = None
    if account is None or account.metadata is None:
        raise helmrelease.ReleaseError(
            f"ServiceAccount {ns}/{sa} is gone: NVIDIA's "
            "running daemons can no longer authenticate; delete their pods (their domains "
            "re-form under our driver) or let their workloads end"
        )
    secret = await _record(client, settings)
    release = helmrelease.decode(secret.data["release"])
    release, changed = helmrelease.keep(release, "ServiceAccount", names.DAEMON_SERVICE_ACCOUNT)
    if changed:
        secret.data["release"] = helmrelease.encode(release)
        with kube.translated(f"replace Secret {ns}/{secret.metadata.name}"):
            await client.replace(secret)  # its resourceVersion: a concurrent helm fails it
    # The live object is marked kept too: ``helm upgrade`` (turning off only NVIDIA's
    # ComputeDomain part) looks at it, not at the record, before it deletes.
    # Helm takes over an existing object only with all three of these (its ownership check).
    annotations = {
        RELEASE_NAME_ANNOTATION: settings.to_release,
        RELEASE_NAMESPACE_ANNOTATION: ns,
        helmrelease.KEEP_ANNOTATION: "keep",
    }
    labels = {MANAGED_BY_LABEL: "Helm"}
    patch = {"metadata": {"annotations": annotations, "labels": labels}}
    with kube.translated(f"patch ServiceAccount {ns}/{sa}"):
        await client.patch(ServiceAccount, sa, patch, namespace=ns)
    values = helmrelease.user_values(release)
    return Prepared(
        revision=int(release.get("version") or 0),
        account_uid=str(account.metadata.uid),
        record_changed=changed,
        carried=tuple(v for v in values if not v[0].startswith(NOT_CARRIED)),
        left_out=tuple(v for v in values if v[0].startswith(NOT_CARRIED)),
    )
