"""The ComputeDomainClique custom resource: per-clique daemon membership with stable indices.

One clique object exists per (ComputeDomain, NVLink clique), named ``<cdUID>.<cliqueID>`` in the
driver namespace and labelled with both. Its top-level ``daemons`` list (no spec/status, no status
subresource) has one entry per daemon; each entry's ``index`` picks the daemon's IMEX DNS name.

Membership rules (pure; the controller applies them and writes the entries, each daemon only its
own entry's status, docs/decisions/0009):
- A registering daemon keeps its entry and index, only its IP is refreshed; a new daemon gets the
  index its node last held in this clique when that is free (remembered in the annotation
  ``resource.nvidia.com/lastIndices``, so daemons replaced all at once come back on their own
  indices whatever order they rejoin in), else the lowest free index in ``[0, max_nodes)``, so
  gaps left by departed daemons are refilled and the names of the remaining peers never move. A
  full clique raises ``CliqueFullError`` (retryable: a slot may free up).
- Every registered daemon pod is appended to ``ownerReferences`` (not as controller), so the
  garbage collector deletes the clique once all pods that ever registered are gone (and the
  CD's DaemonSet, a co-owner, too).
- ``to_dict`` omits ``daemons`` when empty and always writes ``index`` (0 is meaningful).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final, Self

from lightkube.generic_resource import GenericNamespacedResource, create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta

from compute_domains.api import _wire, names
from compute_domains.api.computedomain import ComputeDomainNode, DecodeError, Readiness
from compute_domains.infra import errors

ComputeDomainCliqueResource: Final[type[GenericNamespacedResource]] = create_namespaced_resource(
    names.GROUP, names.VERSION, names.CLIQUE_KIND, names.CLIQUE_PLURAL
)
"""lightkube class for ComputeDomainClique objects (namespaced; ignore its unused ``Status``)."""


class CliqueFullError(errors.TemporaryError):
    """Every index of the clique is taken; a daemon may leave, so retrying can help."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CliqueDaemon:
    """One ``daemons[]`` entry."""

    node_name: str
    """Kubernetes node name (the list-map key)."""
    ip_address: str
    """Pod IP of the daemon."""
    clique_id: str
    """The clique's ID, ``<clusterUUID>.<cliqueNumber>``."""
    index: int = 0
    """Slot in ``[0, max_nodes)``; the IMEX DNS name is ``names.imex_dns_name(index)``."""
    status: Readiness = Readiness.NOT_READY
    """The daemon pod's own readiness, reported by the daemon."""

    @classmethod
    def from_dict(cls, data: Mapping[str, object], path: str = "") -> Self:
        """Decode from wire form; absent ``index`` is 0 and absent ``status`` NotReady."""
        index = _wire.opt_int(data, "index", path)
        status = _wire.opt_enum(data, "status", path, Readiness)
        return cls(
            node_name=_wire.req_str(data, "nodeName", path),
            ip_address=_wire.req_str(data, "ipAddress", path),
            clique_id=_wire.req_str(data, "cliqueID", path),
            index=0 if index is None else index,
            status=status or Readiness.NOT_READY,
        )

    def to_dict(self) -> dict[str, Any]:
        """Encode to wire form (every field, always)."""
        return {
            "nodeName": self.node_name,
            "ipAddress": self.ip_address,
            "cliqueID": self.clique_id,
            "index": self.index,
            "status": self.status.value,
        }

    def to_node(self) -> ComputeDomainNode:
        """The ComputeDomain ``status.nodes[]`` entry this daemon stands for."""
        return ComputeDomainNode(
            name=self.node_name,
            ip_address=self.ip_address,
            clique_id=self.clique_id,
            index=self.index,
            status=self.status,
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ComputeDomainClique:
    """A whole ComputeDomainClique object. Methods return changed copies, never mutate."""

    metadata: ObjectMeta
    daemons: tuple[CliqueDaemon, ...] = ()

    @classmethod
    def new(cls, *, domain_uid: str, clique_id: str, namespace: str) -> Self:
        """An empty clique for one CD and one clique, named and labelled as upstream does."""
        meta = _wire.object_meta(
            {
                "metadata": {
                    "name": names.clique_object_name(domain_uid, clique_id),
                    "namespace": namespace,
                    "labels": {
                        names.COMPUTE_DOMAIN_LABEL: domain_uid,
                        names.CLIQUE_ID_LABEL: clique_id,
                    },
                }
            }
        )
        return cls(metadata=meta)

    @property
    def name(self) -> str:
        """``metadata.name`` ("" if unset)."""
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        """``metadata.namespace`` ("" if unset)."""
        return self.metadata.namespace or ""

    @property
    def domain_uid(self) -> str:
        """UID of the owning CD, from the ``resource.nvidia.com/computeDomain`` label."""
        return self._label(names.COMPUTE_DOMAIN_LABEL)

    @property
    def clique_id(self) -> str:
        """The clique ID, from the ``resource.nvidia.com/computeDomain.cliqueID`` label."""
        return self._label(names.CLIQUE_ID_LABEL)

    def _label(self, key: str) -> str:
        labels: Mapping[str, str] = self.metadata.labels or {}
        return labels.get(key, "")

    def daemon(self, node_name: str) -> CliqueDaemon | None:
        """The entry of node ``node_name``, if any."""
        return next((d for d in self.daemons if d.node_name == node_name), None)

    def lowest_free_index(
        self, max_nodes: int = names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
    ) -> int | None:
        """The lowest index in ``[0, max_nodes)`` no entry holds, or None when all are taken."""
        taken = {d.index for d in self.daemons}
        return next((i for i in range(max_nodes) if i not in taken), None)

    def with_registered(
        self,
        node_name: str,
        ip_address: str,
        max_nodes: int = names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN,
    ) -> Self:
        """Register a daemon: keep its entry (and index) with the new IP, or append a new entry.

        Raises:
            CliqueFullError: the node is new and every index in ``[0, max_nodes)`` is taken.
        """
        existing = self.daemon(node_name)
        if existing is not None:
            updated = dataclasses.replace(existing, ip_address=ip_address)
            kept = self._with_daemons(updated if d is existing else d for d in self.daemons)
            return kept._remembering(node_name, existing.index)
        index = self.lowest_free_index(max_nodes)
        before = self.remembered_indices().get(node_name)
        if (
            before is not None
            and 0 <= before < max_nodes
            and before not in {d.index for d in self.daemons}
        ):
            index = before
        if index is None:
            raise CliqueFullError(
                f"clique {self.name}: no available indices (all {max_nodes} taken) for node "
                f"{node_name}"
            )
        entry = CliqueDaemon(
            node_name=node_name, ip_address=ip_address, clique_id=self.clique_id, index=index
        )
        return self._with_daemons((*self.daemons, entry))._remembering(node_name, index)

    def remembered_indices(self) -> dict[str, int]:
        """Node → the index it last held here (``lastIndices`` annotation; {} when unreadable)."""
        raw = (self.metadata.annotations or {}).get(names.LAST_INDICES_ANNOTATION, "")
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): v for k, v in data.items() if isinstance(v, int)}

    def _remembering(self, node_name: str, index: int) -> Self:
        memory = self.remembered_indices()
        if memory.get(node_name) == index:
            return self
        memory[node_name] = index
        annotations = {
            **(self.metadata.annotations or {}),
            names.LAST_INDICES_ANNOTATION: json.dumps(memory, sort_keys=True),
        }
        meta = _wire.object_meta(
            {"metadata": {**self.metadata.to_dict(), "annotations": annotations}}
        )
        return dataclasses.replace(self, metadata=meta)

    def with_annotation(self, key: str, value: str | None) -> Self:
        """Set annotation ``key`` to ``value`` (None: remove it)."""
        annotations = {k: v for k, v in (self.metadata.annotations or {}).items() if k != key}
        if value is not None:
            annotations[key] = value
        meta = _wire.object_meta(
            {"metadata": {**self.metadata.to_dict(), "annotations": annotations}}
        )
        return dataclasses.replace(self, metadata=meta)

    def with_status(self, node_name: str, status: Readiness) -> Self:
        """Set the readiness of node ``node_name``'s entry.

        Raises:
            errors.TemporaryError: the node is not listed yet (it registers first, then reports).
        """
        existing = self.daemon(node_name)
        if existing is None:
            raise errors.TemporaryError(f"clique {self.name}: node {node_name} not yet listed")
        updated = dataclasses.replace(existing, status=status)
        return self._with_daemons(updated if d is existing else d for d in self.daemons)

    def retaining_nodes(self, node_names: Collection[str]) -> Self:
        """Keep only entries whose node is in ``node_names`` (pruning daemons that vanished)."""
        return self._with_daemons(d for d in self.daemons if d.node_name in node_names)

    def with_owner(self, pod_name: str, pod_uid: str) -> Self:
        """Add the daemon pod as an owner (plain, not controller) unless already listed by UID."""
        refs = [ref.to_dict() for ref in self.metadata.ownerReferences or []]
        if any(ref.get("uid") == pod_uid for ref in refs):
            return self
        refs.append({"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid})
        meta = _wire.object_meta({"metadata": {**self.metadata.to_dict(), "ownerReferences": refs}})
        return dataclasses.replace(self, metadata=meta)

    def with_owner_ref(self, ref: Mapping[str, str]) -> Self:
        """Add a plain owner (``apiVersion``, ``kind``, ``name``, ``uid``) unless listed by UID."""
        refs = [r.to_dict() for r in self.metadata.ownerReferences or []]
        if any(r.get("uid") == ref["uid"] for r in refs):
            return self
        refs.append({k: ref[k] for k in ("apiVersion", "kind", "name", "uid")})
        meta = _wire.object_meta({"metadata": {**self.metadata.to_dict(), "ownerReferences": refs}})
        return dataclasses.replace(self, metadata=meta)

    def to_nodes(self) -> tuple[ComputeDomainNode, ...]:
        """The ComputeDomain ``status.nodes[]`` entries of this clique, in list order."""
        return tuple(d.to_node() for d in self.daemons)

    def _with_daemons(self, daemons: Iterable[CliqueDaemon]) -> Self:
        return dataclasses.replace(self, daemons=tuple(daemons))

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Self:
        """Decode a ComputeDomainClique object as the API server returns it.

        Raises:
            DecodeError: wrong apiVersion/kind or a field of the wrong type.
        """
        _wire.check_type_meta(data, names.API_VERSION, names.CLIQUE_KIND)
        metadata = _wire.object_meta(data)
        try:
            raw = _wire.opt_list(data, "daemons", "")
            daemons = tuple(
                CliqueDaemon.from_dict(_wire.as_object(item, f"daemons[{i}]"), f"daemons[{i}]")
                for i, item in enumerate(raw)
            )
        except DecodeError as err:
            where = f"{metadata.namespace}/{metadata.name}"
            raise DecodeError(f"{names.CLIQUE_KIND} {where}: {err}") from err
        return cls(metadata=metadata, daemons=daemons)

    @classmethod
    def from_resource(cls, resource: GenericNamespacedResource) -> Self:
        """Decode the lightkube object a client call returned."""
        return cls.from_dict(resource)

    def to_dict(self) -> dict[str, Any]:
        """Encode the whole object; ``daemons`` is omitted when empty."""
        out: dict[str, Any] = {
            "apiVersion": names.API_VERSION,
            "kind": names.CLIQUE_KIND,
            "metadata": self.metadata.to_dict(),
        }
        if self.daemons:
            out["daemons"] = [d.to_dict() for d in self.daemons]
        return out

    def to_resource(self) -> GenericNamespacedResource:
        """The object as a lightkube resource, ready for ``create``/``replace``."""
        return ComputeDomainCliqueResource(**self.to_dict())
