"""The ComputeDomain custom resource: typed spec/status models and the lightkube resource classes.

Wire compatibility (upstream ``resource.nvidia.com/v1beta1``, field for field):
- ``to_dict`` writes the exact camelCase names. It always writes ``spec.numNodes`` and
  ``spec.channel.allocationMode`` (the API server defaults both, so what we write equals what we
  read back), always writes ``nodes[].index`` (0 is meaningful) and ``nodes[].cliqueID`` (empty
  means "not fabric-attached"), and omits ``status.nodes`` when empty, as upstream does.
- Our additions to the wire shape: ``status.readyNodes`` and ``status.totalNodes``, derived from
  ``status.nodes`` by ``to_dict`` (never stored separately, so they cannot disagree with the list)
  and ignored by ``from_dict``, for ``kubectl get`` printer columns (see ``crds``); and the
  standard ``status.conditions`` (``api.conditions``), written only when there are any.
- ``from_dict`` tolerates unknown fields (the API server prunes them; a newer schema must not
  break an older reader) but rejects wrong types and missing required fields with ``DecodeError``,
  a ``PermanentError``. A CD without ``spec`` (possible with upstream's CRD) is such an error.

Writers beware: because an empty ``nodes`` list is omitted, a JSON *merge* patch built from
``to_dict`` cannot clear the list; write status with a full ``/status`` replace or with
server-side apply.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Any, Final, Self

from lightkube.generic_resource import (
    GenericNamespacedResource,
    GenericNamespacedStatus,
    create_namespaced_resource,
)
from lightkube.models.meta_v1 import ObjectMeta

from compute_domains.api import _wire, names
from compute_domains.api.conditions import Condition, find

DecodeError = _wire.DecodeError
"""Raised by every ``from_dict`` in this package; a ``PermanentError``."""

ComputeDomainResource: Final[type[GenericNamespacedResource]] = create_namespaced_resource(
    names.GROUP, names.VERSION, names.COMPUTE_DOMAIN_KIND, names.COMPUTE_DOMAIN_PLURAL
)
"""lightkube class for ComputeDomain objects (namespaced). lightkube keeps one process-wide
registry of generic resources; creating the class is idempotent, so importing twice is safe."""
ComputeDomainStatusResource: Final[type[GenericNamespacedStatus]] = ComputeDomainResource.Status
"""lightkube class for the ``/status`` subresource (the only way to change ``status``)."""


class AllocationMode(enum.StrEnum):
    """Which IMEX channels a workload claim gets."""

    SINGLE = "Single"
    """Channel 0 only (the default)."""
    ALL = "All"
    """Every channel of the node (2048 device nodes)."""


class Readiness(enum.StrEnum):
    """Value of ``status.status`` and of each node's and daemon's ``status``."""

    READY = "Ready"
    NOT_READY = "NotReady"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ResourceClaimTemplateRef:
    """``spec.channel.resourceClaimTemplate``: the workload RCT the controller creates."""

    name: str
    """Name of the ResourceClaimTemplate, in the CD's namespace."""

    @classmethod
    def from_dict(cls, data: Mapping[str, object], path: str = "") -> Self:
        """Decode from wire form; ``path`` prefixes field names in errors."""
        return cls(name=_wire.req_str(data, "name", path))

    def to_dict(self) -> dict[str, Any]:
        """Encode to wire form."""
        return {"name": self.name}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ChannelSpec:
    """``spec.channel``: how workload pods reach the domain."""

    resource_claim_template: ResourceClaimTemplateRef
    allocation_mode: AllocationMode = AllocationMode.SINGLE

    @classmethod
    def from_dict(cls, data: Mapping[str, object], path: str = "") -> Self:
        """Decode from wire form; an empty or absent ``allocationMode`` means ``Single``."""
        rct_path = _wire.join(path, "resourceClaimTemplate")
        rct = _wire.req_object(data, "resourceClaimTemplate", path)
        mode = _wire.opt_enum(data, "allocationMode", path, AllocationMode)
        return cls(
            resource_claim_template=ResourceClaimTemplateRef.from_dict(rct, rct_path),
            allocation_mode=mode or AllocationMode.SINGLE,
        )

    def to_dict(self) -> dict[str, Any]:
        """Encode to wire form."""
        return {
            "resourceClaimTemplate": self.resource_claim_template.to_dict(),
            "allocationMode": self.allocation_mode.value,
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ComputeDomainSpec:
    """``spec``: immutable after creation (CEL ``self == oldSelf``)."""

    channel: ChannelSpec
    num_nodes: int = 0
    """Deprecated expected node count; only makes ``status.status`` wait for that many entries."""

    @classmethod
    def from_dict(cls, data: Mapping[str, object], path: str = "spec") -> Self:
        """Decode from wire form (value rules such as the name pattern are the CRD schema's)."""
        channel = _wire.req_object(data, "channel", path)
        num_nodes = _wire.opt_int(data, "numNodes", path)
        return cls(
            channel=ChannelSpec.from_dict(channel, _wire.join(path, "channel")),
            num_nodes=0 if num_nodes is None else num_nodes,
        )

    def to_dict(self) -> dict[str, Any]:
        """Encode to wire form."""
        return {"numNodes": self.num_nodes, "channel": self.channel.to_dict()}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ComputeDomainNode:
    """One ``status.nodes[]`` entry: a node running a daemon of this CD."""

    name: str
    """Kubernetes node name (the list-map key)."""
    ip_address: str
    """Pod IP of the daemon pod on that node."""
    clique_id: str
    """``<clusterUUID>.<cliqueNumber>``; empty for a node that is not fabric-attached."""
    index: int = 0
    """Slot within the clique (IMEX DNS name); ``names.NON_FABRIC_INDEX`` for non-fabric nodes."""
    status: Readiness = Readiness.NOT_READY

    @classmethod
    def from_dict(cls, data: Mapping[str, object], path: str = "") -> Self:
        """Decode from wire form; absent ``index`` is 0 and absent ``status`` NotReady."""
        index = _wire.opt_int(data, "index", path)
        status = _wire.opt_enum(data, "status", path, Readiness)
        return cls(
            name=_wire.req_str(data, "name", path),
            ip_address=_wire.req_str(data, "ipAddress", path),
            clique_id=_wire.req_str(data, "cliqueID", path),
            index=0 if index is None else index,
            status=status or Readiness.NOT_READY,
        )

    def to_dict(self) -> dict[str, Any]:
        """Encode to wire form (every field, always)."""
        return {
            "name": self.name,
            "ipAddress": self.ip_address,
            "cliqueID": self.clique_id,
            "index": self.index,
            "status": self.status.value,
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ComputeDomainStatus:
    """``status``: global readiness plus one entry per node (written by the controller only)."""

    status: Readiness = Readiness.NOT_READY
    nodes: tuple[ComputeDomainNode, ...] = ()
    conditions: tuple[Condition, ...] = ()
    """Standard conditions (``Ready``, ``Deleting``); ``status`` agrees with ``Ready``."""

    @property
    def ready_nodes(self) -> int:
        """How many entries are Ready (written as ``status.readyNodes``)."""
        return sum(1 for node in self.nodes if node.status is Readiness.READY)

    @property
    def total_nodes(self) -> int:
        """How many entries there are (written as ``status.totalNodes``)."""
        return len(self.nodes)

    @classmethod
    def computed(cls, nodes: Iterable[ComputeDomainNode], *, num_nodes: int) -> Self:
        """The status for ``nodes``, with ``status`` derived as upstream does.

        NotReady while fewer than ``num_nodes`` entries exist or while any entry is NotReady;
        otherwise Ready (so ``num_nodes == 0`` and no entries is Ready: advisory only).
        """
        entries = tuple(nodes)
        if len(entries) < num_nodes or any(n.status is Readiness.NOT_READY for n in entries):
            return cls(status=Readiness.NOT_READY, nodes=entries)
        return cls(status=Readiness.READY, nodes=entries)

    def node(self, name: str) -> ComputeDomainNode | None:
        """The entry of node ``name``, if any."""
        return next((n for n in self.nodes if n.name == name), None)

    def condition(self, kind: str) -> Condition | None:
        """The condition of type ``kind``, if any."""
        return find(self.conditions, kind)

    @classmethod
    def from_dict(cls, data: Mapping[str, object], path: str = "status") -> Self:
        """Decode from wire form; the derived counters are ignored."""
        status = _wire.opt_enum(data, "status", path, Readiness)
        nodes_path = _wire.join(path, "nodes")
        raw_nodes = _wire.opt_list(data, "nodes", path)
        nodes = tuple(
            ComputeDomainNode.from_dict(
                _wire.as_object(item, f"{nodes_path}[{i}]"), f"{nodes_path}[{i}]"
            )
            for i, item in enumerate(raw_nodes)
        )
        conds_path = _wire.join(path, "conditions")
        conds = tuple(
            Condition.from_dict(_wire.as_object(item, f"{conds_path}[{i}]"), f"{conds_path}[{i}]")
            for i, item in enumerate(_wire.opt_list(data, "conditions", path))
        )
        return cls(status=status or Readiness.NOT_READY, nodes=nodes, conditions=conds)

    def to_dict(self) -> dict[str, Any]:
        """Encode to wire form, with ``readyNodes``/``totalNodes`` derived from ``nodes``."""
        out: dict[str, Any] = {"status": self.status.value}
        if self.nodes:
            out["nodes"] = [node.to_dict() for node in self.nodes]
        out["readyNodes"] = self.ready_nodes
        out["totalNodes"] = self.total_nodes
        if self.conditions:
            out["conditions"] = [c.to_dict() for c in self.conditions]
        return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ComputeDomain:
    """A whole ComputeDomain object: metadata, spec, and status (None until first written)."""

    metadata: ObjectMeta
    spec: ComputeDomainSpec
    status: ComputeDomainStatus | None = None

    @property
    def name(self) -> str:
        """``metadata.name`` ("" if unset)."""
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        """``metadata.namespace`` ("" if unset)."""
        return self.metadata.namespace or ""

    @property
    def uid(self) -> str:
        """``metadata.uid`` ("" before the object is created)."""
        return self.metadata.uid or ""

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Self:
        """Decode a ComputeDomain object as the API server returns it.

        Raises:
            DecodeError: wrong apiVersion/kind, no ``spec``, or a field of the wrong type.
        """
        _wire.check_type_meta(data, names.API_VERSION, names.COMPUTE_DOMAIN_KIND)
        metadata = _wire.object_meta(data)
        try:
            spec = ComputeDomainSpec.from_dict(_wire.req_object(data, "spec", ""))
            raw_status = _wire.opt_object(data, "status", "")
            status = None if raw_status is None else ComputeDomainStatus.from_dict(raw_status)
        except DecodeError as err:
            where = f"{metadata.namespace}/{metadata.name}"
            raise DecodeError(f"{names.COMPUTE_DOMAIN_KIND} {where}: {err}") from err
        return cls(metadata=metadata, spec=spec, status=status)

    @classmethod
    def from_resource(cls, resource: GenericNamespacedResource) -> Self:
        """Decode the lightkube object a client call returned."""
        return cls.from_dict(resource)

    def to_dict(self) -> dict[str, Any]:
        """Encode the whole object (``status`` only when set)."""
        out: dict[str, Any] = {
            "apiVersion": names.API_VERSION,
            "kind": names.COMPUTE_DOMAIN_KIND,
            "metadata": self.metadata.to_dict(),
            "spec": self.spec.to_dict(),
        }
        if self.status is not None:
            out["status"] = self.status.to_dict()
        return out

    def to_resource(self) -> GenericNamespacedResource:
        """The object as a lightkube resource, ready for ``create``/``replace``."""
        return ComputeDomainResource(**self.to_dict())
