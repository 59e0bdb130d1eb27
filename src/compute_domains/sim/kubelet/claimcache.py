"""The simulated kubelet's claim cache and its checkpoint, in the kubelet's own file format.

One ``ClaimInfo`` per prepared (or being prepared) ResourceClaim, keyed ``<namespace>/<name>``:
the pods that use it, the drivers it is prepared by and what each returned. The cache is
checkpointed after every change to ``var/lib/kubelet/dra_manager_state`` as the 1.34 kubelet
writes it (``{"Data": <json string>, "Checksum": crc32(Data)}`` holding a ``DRACheckpoint``),
atomically, so a restarted agent (or a rebooted node) unprepares what it had prepared. An
unreadable checkpoint is logged, never fatal.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import zlib
from pathlib import Path
from typing import Any

from compute_domains.infra import atomicfile

STATE_FILE = "var/lib/kubelet/dra_manager_state"
"""Where the checkpoint lies under the node root."""


@dataclasses.dataclass(slots=True)
class ClaimInfo:
    """One claim in the cache (the kubelet's ``ClaimInfo``)."""

    uid: str
    name: str
    namespace: str
    pod_uids: set[str]
    drivers: list[str]
    devices: dict[str, list[dict[str, Any]]]
    """Driver → the devices its ``NodePrepareResources`` returned, in the checkpoint's form."""
    prepared: bool = False
    """Every driver answered the prepare call (not checkpointed: a loaded entry prepares again)."""


class ClaimCache:
    """The claims of one node; ``lock`` guards every read-modify-write of ``entries``."""

    def __init__(self, root: Path, log: logging.LoggerAdapter[logging.Logger]) -> None:
        self.path = root / STATE_FILE
        self.entries: dict[str, ClaimInfo] = {}
        self.lock = asyncio.Lock()
        self._log = log
        self._load()

    def _load(self) -> None:
        try:
            outer = json.loads(self.path.read_text())
            data = outer["Data"]
            if zlib.crc32(data.encode()) != outer["Checksum"]:
                raise ValueError("checksum mismatch")
            for e in json.loads(data)["ClaimInfoStateList"]:
                self.entries[f"{e['Namespace']}/{e['ClaimName']}"] = ClaimInfo(
                    uid=e["ClaimUID"],
                    name=e["ClaimName"],
                    namespace=e["Namespace"],
                    pod_uids=set(e["PodUIDs"]),
                    drivers=list(e["DriverState"]),
                    devices={d: s["Devices"] for d, s in e["DriverState"].items()},
                )
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as err:
            self._log.error("DRA checkpoint %s unreadable (%s); starting empty", self.path, err)

    def save(self) -> None:
        """Write the checkpoint (blocking: callers run it in a thread, under ``lock``)."""
        entries = [
            {
                "ClaimUID": e.uid,
                "ClaimName": e.name,
                "Namespace": e.namespace,
                "PodUIDs": {p: {} for p in sorted(e.pod_uids)},
                "DriverState": {d: {"Devices": e.devices.get(d, [])} for d in e.drivers},
            }
            for e in self.entries.values()
        ]
        data = json.dumps(
            {
                "kind": "DRACheckpoint",
                "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1",
                "ClaimInfoStateList": entries,
            }
        )
        atomicfile.write_atomic(
            self.path, json.dumps({"Data": data, "Checksum": zlib.crc32(data.encode())})
        )
