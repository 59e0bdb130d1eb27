"""The node's allocatable devices and the ResourceSlice content that advertises them (pure).

Devices (driver ``compute-domain.nvidia.com``, one pool named after the node):
- ``daemon-0``: ``type="daemon"``, ``id=0``. One per node: the CD daemon pod's claim.
- ``channel-0`` … ``channel-<K-1>``: ``type="channel"``, ``id=<slot>``. These are *slots*, not
  IMEX channels. Upstream publishes only ``channel-0``, so one workload claim per node; we
  publish K slots so that several pods of one ComputeDomain on one node each get their own
  claim from the CD's template. Every slot maps to the same IMEX channel(s) of the CD: channel 0
  in ``Single`` mode (upstream's one channel per CD and node), all 2048 channel device nodes in
  ``All`` mode. The slot number never reaches the container.

The holder (beyond upstream). A node serves at most one ComputeDomain at a time (one IMEX
daemon, one node label): the CD whose channel claims are live on it is the node's *holder*. While
CD ``X`` holds the node (from the moment its node label is written until the last of its channel
claims is unprepared) *every* channel slot carries the string attribute ``domain = "<X's UID>"``
(``names.CHANNEL_HOLDER_ATTRIBUTE``); a node without live channel claims
publishes no ``domain`` attribute. The controller's workload ResourceClaimTemplate for CD ``X``
selects ``!has(attrs.domain) || attrs.domain == "<X's UID>"``, so the scheduler puts X's pods on
free nodes or on X's own nodes (up to K pods each), and never on a node held by another CD.
The scheduler only sees a new holder once the slice is republished, so two CDs racing for one
free node can both be allocated there; the loser's prepare then fails with a clear, retryable
"held by another ComputeDomain" error, and the controller re-places the loser's pod when a
controller owns it, or reports why it waits (``controller/heldnodes.py``, docs/status.md).
``daemon-0`` carries no holder attribute: daemon pods are placed by the node label.

The per-clique scope (issue 26, ``holder``): a node running its clique's shared IMEX (a live
per-clique claim, or the ``compute-domains/shared-imex=on`` label) advertises
``domain = "shared-imex"`` (``sharedimex.SHARED_HOLDER``, never a CD UID) on every slot. A
per-clique CD's template selects ``!has(domain) || domain == "shared-imex"``
(``sharedimex.channel_selector``), so several per-clique CDs share such a node, up to K claims
in all, and no per-domain CD's template ever selects it.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from compute_domains.api import names

DAEMON_DEVICE = "daemon-0"
"""Name of the one daemon device."""
_CHANNEL_PREFIX = "channel-"


class DeviceType(enum.StrEnum):
    """Value of a device's ``type`` attribute."""

    CHANNEL = names.CHANNEL_DEVICE_TYPE
    DAEMON = names.DAEMON_DEVICE_TYPE


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Allocatable:
    """One device this node offers."""

    name: str
    type: DeviceType
    id: int


def channel_device(slot: int) -> str:
    """The device name of channel slot ``slot``."""
    return f"{_CHANNEL_PREFIX}{slot}"


def allocatable(channel_slots: int) -> dict[str, Allocatable]:
    """Every device of a node with ``channel_slots`` slots, by name (channels first)."""
    devices = {
        channel_device(i): Allocatable(name=channel_device(i), type=DeviceType.CHANNEL, id=i)
        for i in range(channel_slots)
    }
    devices[DAEMON_DEVICE] = Allocatable(name=DAEMON_DEVICE, type=DeviceType.DAEMON, id=0)
    return devices


def slice_devices(channel_slots: int, holder: str) -> list[dict[str, Any]]:
    """``spec.devices`` of the node's ResourceSlice; ``holder`` is a CD UID, ``SHARED_HOLDER``
    or empty (free)."""
    out: list[dict[str, Any]] = []
    for device in allocatable(channel_slots).values():
        attributes: dict[str, Any] = {
            "type": {"string": device.type.value},
            "id": {"int": device.id},
        }
        if holder and device.type is DeviceType.CHANNEL:
            attributes[names.CHANNEL_HOLDER_ATTRIBUTE] = {"string": holder}
        out.append({"name": device.name, "attributes": attributes})
    return out


def slice_name(node: str) -> str:
    """The (deterministic) name of the node's ResourceSlice."""
    return f"{node}-{names.DRIVER_NAME}"


def slice_spec(node: str, channel_slots: int, holder: str, generation: int) -> dict[str, Any]:
    """The ResourceSlice ``spec`` of one node: one slice, one pool named after the node."""
    return {
        "driver": names.DRIVER_NAME,
        "nodeName": node,
        "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
        "devices": slice_devices(channel_slots, holder),
    }


def same_devices(published: Any, wanted: list[dict[str, Any]]) -> bool:
    """Whether a published ``spec.devices`` (plain JSON) advertises exactly ``wanted``."""
    if not isinstance(published, list):
        return False

    def key(items: list[Any]) -> list[tuple[str, str]]:
        return sorted(
            (str(d.get("name")), repr(sorted((d.get("attributes") or {}).items())))
            for d in items
            if isinstance(d, dict)
        )

    return len(published) == len(wanted) and key(published) == key(wanted)
