"""What DRANET prepared for each pod on one node: its pod config store, kept on the node.

DRANET records at ``NodePrepareResources`` what its runtime hooks will need (per pod UID, per
device: the claim, the netdev to move and its addresses, the RDMA link and character devices),
because the hooks must be fast; it persists the store under ``/var/run/dranet`` so a restarted
DRANET still knows its pods. The stand-in keeps the same store in
``<node root>/var/run/dranet/podconfig.json``, written atomically on every change (a reboot
clears ``/var/run``, as on a host). Unprepare drops a claim from every pod that had it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from compute_domains.infra import atomicfile

STORE = "var/run/dranet/podconfig.json"
"""The store's path under the node root."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DeviceConfig:
    """One allocated device of a pod: what the hooks apply."""

    claim: str
    """``namespace/name`` of the claim that allocated it."""
    device: str
    """DRANET's device name (``pci-0000-03-00-0``)."""
    if_name: str
    mac: str
    addresses: tuple[str, ...]
    rdma_link: str
    char_devices: tuple[tuple[str, int, int], ...]
    """(path, major, minor) of the RDMA character devices the pod's containers get."""


class PodConfigStore:
    """Pod UID → device name → ``DeviceConfig`` of one node (not thread-safe: one loop)."""

    def __init__(self, node_root: Path) -> None:
        self._path = node_root / STORE
        self._pods: dict[str, dict[str, DeviceConfig]] = {}
        self._load()

    def _load(self) -> None:
        try:
            raw: dict[str, Any] = json.loads(self._path.read_text())
        except (OSError, ValueError):
            return  # none yet (or a torn file from a crash: what it held is re-prepared)
        for uid, devices in raw.items():
            self._pods[uid] = {
                name: DeviceConfig(
                    claim=d["claim"],
                    device=name,
                    if_name=d["if_name"],
                    mac=d["mac"],
                    addresses=tuple(d["addresses"]),
                    rdma_link=d["rdma_link"],
                    char_devices=tuple((p, ma, mi) for p, ma, mi in d["char_devices"]),
                )
                for name, d in devices.items()
            }

    def _save(self) -> None:
        doc = {
            uid: {name: dataclasses.asdict(cfg) for name, cfg in devices.items()}
            for uid, devices in self._pods.items()
        }
        self._path.parent.mkdir(parents=True, exist_ok=True)
        atomicfile.write_atomic(self._path, json.dumps(doc, indent=1), durable=False)

    def set(self, pod_uid: str, cfg: DeviceConfig) -> None:
        """Record ``cfg`` for the pod (replacing that device's earlier entry)."""
        self._pods.setdefault(pod_uid, {})[cfg.device] = cfg
        self._save()

    def pod(self, pod_uid: str) -> list[DeviceConfig]:
        """The pod's devices, by device name; empty when DRANET prepared nothing for it."""
        return [cfg for _, cfg in sorted(self._pods.get(pod_uid, {}).items())]

    def delete_claim(self, claim: str) -> None:
        """Forget every device of ``claim`` (``namespace/name``), in every pod."""
        changed = False
        for uid in list(self._pods):
            kept = {n: c for n, c in self._pods[uid].items() if c.claim != claim}
            if len(kept) != len(self._pods[uid]):
                changed = True
                if kept:
                    self._pods[uid] = kept
                else:
                    del self._pods[uid]
        if changed:
            self._save()
