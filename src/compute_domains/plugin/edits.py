"""Container edits of a prepared claim (pure: plan + node facts → CDI edits and returned devices).

This is the "compute" half of prepare; ``claimfiles`` applies it (folders, files) and ``state``
records it (checkpoint). Rules (upstream §2.8.1, §2.8.2, §2.9):
- Channel device on a node with a clique ID: device nodes ``/dev/nvidia-caps-imex-channels/
  channel<N>`` for the CD's channels (channel 0, or all 2048 in ``All`` mode), whatever the
  slot. Beyond upstream, also the CD's identity env (as daemons get it) and the per-CD folder
  read-only at ``/imexd``, so a workload can ask its node's IMEX daemon about the domain.
  Without a clique ID (no multi-node NVLink): no edits and no CDI ID.
- Channel device of a per-clique CD (issue 26): only ``channel<n>``, the CD's own channel in
  the clique's shared IMEX domain (``registry``), never another; the identity env as above; and
  at ``/imexd``, read-only, the shared IMEX folder (``PathSettings.shared_imex_dir``, where the
  resident agent writes the shared IMEX's files), so the workload can ask the shared IMEX
  whether the domain is UP as a per-domain workload asks its own. It holds the IMEX config and
  the clique's node list, nothing of another CD (no memory is reachable without a channel).
- Daemon device: env ``CLIQUE_ID``, ``COMPUTE_DOMAIN_UUID/NAME/NAMESPACE``, the per-CD host
  folder bind-mounted at ``/imexd``, and (with a clique ID) the fabric-imex-mgmt capability
  node; its CDI IDs are the base spec's ``device=all`` first, then its own claim device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from compute_domains.api.computedomain import ComputeDomain
from compute_domains.infra import cdispec, errors
from compute_domains.plugin import cdi, checkpoint, configs, devices, nodeinfo


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NodeFacts:
    """What edits depend on besides the claim."""

    clique_id: str
    """This node's clique ID; empty without multi-node NVLink."""
    channel_major: int | None
    """Char major of the IMEX channels (required with a clique ID)."""
    caps_major: int | None
    """Char major of ``nvidia-caps`` (required with a clique ID)."""
    imex_mgmt: nodeinfo.CapabilityDevice | None = None
    """The fabric-imex-mgmt capability (required for daemon claims with a clique ID)."""


def container_edits(
    plan: configs.Plan,
    *,
    facts: NodeFacts,
    cd: ComputeDomain,
    domain_dir: Path,
    channel: int | None = None,
) -> dict[str, cdispec.ContainerEdits]:
    """Allocatable device name → its edits, in the plan's order.

    Args:
        plan: the claim's plan.
        facts: node facts from discovery (and the capability file for daemon claims).
        cd: the ComputeDomain the claim belongs to.
        domain_dir: host path of the folder mounted at ``/imexd``: the CD's own, or (per-clique)
            the shared IMEX folder.
        channel: the CD's channel in the clique's shared IMEX domain (per-clique scope: the
            only channel its devices inject); None for the per-domain scope's channels.

    Raises:
        errors.TemporaryError: a fact the edits need is missing on this node.
    """
    out: dict[str, cdispec.ContainerEdits] = {}
    for a in plan.assignments:
        if a.type is devices.DeviceType.CHANNEL:
            channels = a.channels if channel is None else (channel,)
            out[a.device] = _channel_edits(channels, facts, cd, domain_dir)
        else:
            out[a.device] = _daemon_edits(facts, cd, domain_dir)
    return out


def _channel_edits(
    channels: Sequence[int], facts: NodeFacts, cd: ComputeDomain, domain_dir: Path
) -> cdispec.ContainerEdits:
    if not facts.clique_id:
        return cdispec.ContainerEdits()
    if facts.channel_major is None:
        raise errors.TemporaryError("the IMEX channel char major is unknown on this node")
    # Beyond upstream: the workload also sees its domain (read-only /imexd with the node's IMEX
    # config, and the domain's identity), so a program can ask its local IMEX daemon whether
    # the domain is UP (`nvidia-imex-ctl -c /imexd/imexd.cfg -N`) before using fabric memory.
    domain = cdispec.ContainerEdits(
        env=(
            f"COMPUTE_DOMAIN_UUID={cd.uid}",
            f"COMPUTE_DOMAIN_NAME={cd.name}",
            f"COMPUTE_DOMAIN_NAMESPACE={cd.namespace}",
            f"CLIQUE_ID={facts.clique_id}",
        ),
        mounts=(
            cdispec.Mount(
                host_path=str(domain_dir),
                container_path="/imexd",
                options=("ro", "nosuid", "nodev", "bind"),
            ),
        ),
    )
    return cdi.channel_edits(channels, major=facts.channel_major).merged(domain)


def _daemon_edits(facts: NodeFacts, cd: ComputeDomain, domain_dir: Path) -> cdispec.ContainerEdits:
    nodes: tuple[cdispec.DeviceNode, ...] = ()
    if facts.clique_id:
        if facts.imex_mgmt is None or facts.caps_major is None:
            raise errors.TemporaryError(
                "the fabric-imex-mgmt capability or the nvidia-caps major is missing on this "
                "node; the IMEX daemon cannot run without it"
            )
        cap = facts.imex_mgmt
        nodes = (
            cdi.caps_device_node(minor=cap.minor, major=facts.caps_major, file_mode=cap.file_mode),
        )
    return cdi.daemon_edits(
        clique_id=facts.clique_id,
        domain_uid=cd.uid,
        domain_name=cd.name,
        domain_namespace=cd.namespace,
        domain_dir=domain_dir,
        device_nodes=nodes,
    )


def prepared_devices(
    claim_uid: str,
    plan: configs.Plan,
    edits: Mapping[str, cdispec.ContainerEdits],
) -> tuple[cdi.ClaimSpec | None, tuple[checkpoint.PreparedDevice, ...]]:
    """The claim's CDI spec (None when nothing needs edits) and the devices to return.

    Raises:
        cdispec.CdiSpecError: a CDI device name would be invalid.
    """
    spec = cdi.build_claim_spec(claim_uid, edits)
    ids = dict(spec.device_ids) if spec is not None else {}
    out = []
    for a in plan.assignments:
        own = (ids[a.device],) if a.device in ids else ()
        cdi_ids = (cdi.BASE_DEVICE_ID, *own) if a.type is devices.DeviceType.DAEMON else own
        out.append(
            checkpoint.PreparedDevice(
                pool_name=a.pool,
                device_name=a.device,
                request_names=(a.request_name,),
                cdi_device_ids=cdi_ids,
                kind=a.type.value,
                domain_uid=plan.domain_uid,
            )
        )
    return spec, tuple(out)


def planned_devices(plan: configs.Plan) -> tuple[checkpoint.PreparedDevice, ...]:
    """The devices recorded while a prepare is in progress (no CDI IDs yet)."""
    return tuple(
        checkpoint.PreparedDevice(
            pool_name=a.pool,
            device_name=a.device,
            request_names=(a.request_name,),
            kind=a.type.value,
            domain_uid=plan.domain_uid,
        )
        for a in plan.assignments
    )
