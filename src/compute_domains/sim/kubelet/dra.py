"""The kubelet's side of DRA on a simulated node (Kubernetes 1.34 semantics).

Plugin registration: sockets in the node's ``plugins_registry`` are found by a 1 s reconcile
(the real kubelet's reconciler period) and registered with ``GetInfo`` →
version choice (the plugin's first of ``v1.DRAPlugin``/``v1beta1.DRAPlugin``) →
``NotifyRegistrationStatus``. Preparing a pod's claims follows the kubelet: resolve names from
``status.resourceClaimStatuses``, check ownership, reservation and allocation, batch per driver,
call ``NodePrepareResources`` with a 45 s deadline, and keep a claim cache checkpointed in the
kubelet's ``dra_manager_state`` format. Unprepare happens when the last pod using a claim goes,
and from a periodic reconcile for pods that vanished (also after an agent restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import grpc
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains._proto.dra.v1 import api_pb2 as v1
from compute_domains._proto.dra.v1 import api_pb2_grpc as v1_grpc
from compute_domains._proto.dra.v1beta1 import api_pb2 as v1beta1
from compute_domains._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from compute_domains._proto.pluginregistration.v1 import api_pb2 as reg
from compute_domains._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from compute_domains.containers import runtime
from compute_domains.infra import atomicfile, kube
from compute_domains.sim.kubelet import cdi, pods

logger = logging.getLogger(__name__)

_SERVICES = {"v1.DRAPlugin": "v1", "v1beta1.DRAPlugin": "v1beta1"}
Prepared = dict[str, list[tuple[list[str], list[str]]]]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DraSettings:
    """Where the node's kubelet folders are and how long calls may take."""

    node: str
    root: Path
    call_timeout_s: float = 45.0
    """Deadline of one NodePrepare/NodeUnprepare call (the kubelet's 45 s)."""
    reconcile_s: float = 10.0
    """Period of the unprepare reconcile for vanished pods (the kubelet uses 60 s)."""


@dataclasses.dataclass(slots=True)
class _Plugin:
    driver: str
    endpoint: Path
    version: str
    channel: grpc.aio.Channel


@dataclasses.dataclass(slots=True)
class _Entry:
    uid: str
    name: str
    namespace: str
    pod_uids: set[str]
    drivers: list[str]
    devices: dict[str, list[dict[str, Any]]]
    prepared: bool = False


class DraManager:
    """Plugin registry and claim cache of one node."""

    def __init__(
        self,
        settings: DraSettings,
        client: AsyncClient,
        active_pods: Callable[[], set[str]] | None = None,
    ) -> None:
        self._s = settings
        self._client = client
        self._plugins: dict[str, _Plugin] = {}
        self._sockets: dict[Path, str] = {}
        self._identity: dict[Path, tuple[int, int]] = {}
        self._cache: dict[str, _Entry] = {}
        self._lock = asyncio.Lock()
        self.active_pods = active_pods or set
        self._log = logging.LoggerAdapter(logger, {"node": settings.node})
        self._load()

    @property
    def _state_file(self) -> Path:
        return self._s.root / "var/lib/kubelet/dra_manager_state"

    def boot_id(self) -> str:
        """The node's current boot id."""
        path = self._s.root / "proc/sys/kernel/random/boot_id"
        return path.read_text().strip() if path.exists() else ""

    def registered(self, driver: str) -> bool:
        """True when a plugin of ``driver`` is registered."""
        return driver in self._plugins

    # ---- checkpoint (kubelet format: {"Data": <json string>, "Checksum": crc32(Data)}) ----

    def _load(self) -> None:
        try:
            outer = json.loads(self._state_file.read_text())
            data = outer["Data"]
            if zlib.crc32(data.encode()) != outer["Checksum"]:
                raise ValueError("checksum mismatch")
            for e in json.loads(data)["ClaimInfoStateList"]:
                self._cache[f"{e['Namespace']}/{e['ClaimName']}"] = _Entry(
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
            self._log.error(
                "DRA checkpoint %s unreadable (%s); starting empty", self._state_file, err
            )

    def _save(self) -> None:
        entries = [
            {
                "ClaimUID": e.uid,
                "ClaimName": e.name,
                "Namespace": e.namespace,
                "PodUIDs": {p: {} for p in sorted(e.pod_uids)},
                "DriverState": {d: {"Devices": e.devices.get(d, [])} for d in e.drivers},
            }
            for e in self._cache.values()
        ]
        data = json.dumps(
            {
                "kind": "DRACheckpoint",
                "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1",
                "ClaimInfoStateList": entries,
            }
        )
        atomicfile.write_atomic(
            self._state_file, json.dumps({"Data": data, "Checksum": zlib.crc32(data.encode())})
        )

    # ---- registration ----

    async def run(self) -> None:
        """Reconcile plugin sockets and vanished pods until cancelled."""
        registry = self._s.root / "var/lib/kubelet/plugins_registry"
        loop = asyncio.get_running_loop()
        # The first sweep waits a period, as the kubelet's reconcile waits for its pod sources:
        # right after a (re)start no pod worker exists yet, and the sweep would unprepare the
        # claims of every pod still bound here, racing the workers that prepare them again.
        last_pod_sweep = loop.time()
        try:
            while True:
                # A socket's identity is its inode: deleted and re-created between two passes
                # is a new registration, as the kubelet's fsnotify watcher would see it.
                found = {}
                for entry in registry.glob("*"):
                    with contextlib.suppress(OSError):
                        st = entry.lstat()
                        if stat.S_ISSOCK(st.st_mode) and not entry.name.startswith("."):
                            found[entry] = (st.st_ino, st.st_ctime_ns)
                for sock in list(self._sockets):
                    if found.get(sock) != self._identity.get(sock):
                        await self._deregister(sock)
                for sock, ident in found.items():
                    if sock not in self._sockets:
                        self._identity[sock] = ident
                        await self._register(sock)
                if loop.time() - last_pod_sweep >= self._s.reconcile_s:
                    last_pod_sweep = loop.time()
                    await self._sweep_vanished()
                await asyncio.sleep(1.0)
        finally:
            for p in self._plugins.values():
                await p.channel.close()

    async def _register(self, sock: Path) -> None:
        try:
            async with grpc.aio.insecure_channel(f"unix:{sock}") as ch:
                stub = cast("reg_grpc.RegistrationAsyncStub", reg_grpc.RegistrationStub(ch))
                info = await stub.GetInfo(reg.InfoRequest(), timeout=1.0)
                error = ""
                version = next(
                    (_SERVICES[v] for v in info.supported_versions if v in _SERVICES), ""
                )
                if info.type != "DRAPlugin":
                    error = (
                        "RegisterPlugin error -- no handler registered for plugin type: "
                        f"{info.type} at socket {sock}"
                    )
                elif not version:
                    error = (
                        f"RegisterPlugin error -- plugin validation failed with err: none "
                        f"of services supported by the plugin ({list(info.supported_versions)})"
                        " are supported by the kubelet ([v1.DRAPlugin v1beta1.DRAPlugin])"
                    )
                await stub.NotifyRegistrationStatus(
                    reg.RegistrationStatus(plugin_registered=not error, error=error), timeout=5.0
                )
        except grpc.aio.AioRpcError as err:
            self._log.warning(
                "plugin socket %s did not answer registration: %s", sock, err.details()
            )
            return
        self._sockets[sock] = info.name
        if error:
            self._log.warning("%s", error)
            return
        endpoint = Path(info.endpoint) if info.endpoint else sock
        host_endpoint = self._s.root / str(endpoint).lstrip("/")
        channel = grpc.aio.insecure_channel(f"unix:{host_endpoint}")
        old = self._plugins.get(info.name)
        self._plugins[info.name] = _Plugin(info.name, host_endpoint, version, channel)
        if old is not None:
            await old.channel.close()
        self._log.info("registered DRA plugin %s (%s) at %s", info.name, version, host_endpoint)

    async def _deregister(self, sock: Path) -> None:
        driver = self._sockets.pop(sock, "")
        self._identity.pop(sock, None)
        plugin = self._plugins.get(driver)
        if plugin is not None and driver not in self._sockets.values():
            del self._plugins[driver]
            await plugin.channel.close()
            self._log.info("deregistered DRA plugin %s", driver)

    # ---- prepare ----

    def _claim_names(self, pod: Pod) -> list[tuple[str, str]]:
        """(pod claim name, ResourceClaim name) pairs, as the kubelet resolves them."""
        meta, spec = pod.metadata, pod.spec
        assert meta is not None and spec is not None
        statuses = {
            s.name: s.resourceClaimName
            for s in (pod.status.resourceClaimStatuses or [] if pod.status else [])
        }
        out = []
        for rc in spec.resourceClaims or []:
            if rc.resourceClaimName:
                out.append((rc.name, rc.resourceClaimName))
            elif rc.resourceClaimTemplateName:
                if rc.name not in statuses:
                    raise pods.PrepareError(
                        f'pod "{meta.namespace}/{meta.name}": ResourceClaim not created yet'
                    )
                if statuses[rc.name]:
                    out.append((rc.name, str(statuses[rc.name])))
            else:
                raise pods.PrepareError(
                    f'spec.resourceClaim "{rc.name}": none of the supported fields are set'
                )
        return out

    async def _checked_claim(self, pod: Pod, claim_name: str, template: bool) -> ResourceClaim:
        meta = pod.metadata
        assert meta is not None
        try:
            with kube.translated(f"fetch ResourceClaim {claim_name}"):
                claim = await self._client.get(ResourceClaim, claim_name, namespace=meta.namespace)
        except kube.KubeError as err:
            raise pods.PrepareError(
                f"fetch ResourceClaim {claim_name}: {kube.server_message(err)}"
            ) from err
        cm = claim.metadata
        assert cm is not None
        if template and not any(
            o.controller and o.uid == meta.uid for o in cm.ownerReferences or []
        ):
            raise pods.PrepareError(
                f"ResourceClaim {meta.namespace}/{claim_name} was not "
                f"created for pod {meta.namespace}/{meta.name} (pod is not "
                "owner)"
            )
        status = claim.status
        if status is None or not any(r.uid == meta.uid for r in status.reservedFor or []):
            raise pods.PrepareError(
                f"pod {meta.name} ({meta.uid}) is not allowed to use "
                f"ResourceClaim {claim_name} ({cm.uid})"
            )
        if status.allocation is None:
            raise pods.PrepareError(f"ResourceClaim {claim_name}: not allocated")
        return claim

    async def prepare(self, pod: Pod) -> Prepared:
        """Prepare every claim of the pod; pod claim name → [(request names, CDI ids)]."""
        meta, spec = pod.metadata, pod.spec
        assert meta is not None and spec is not None and meta.uid
        templates = {rc.name for rc in spec.resourceClaims or [] if rc.resourceClaimTemplateName}
        names = self._claim_names(pod)
        claims = []
        for pod_name, claim_name in names:
            claim = await self._checked_claim(pod, claim_name, pod_name in templates)
            results = claim.status.allocation.devices.results  # type: ignore[union-attr]
            drivers = sorted({r.driver for r in results or []})
            for d in drivers:
                if not d:
                    raise pods.PrepareError("DRA driver name is empty")
                if d not in self._plugins:
                    raise pods.PrepareError(f"DRA driver {d} is not registered")
            claims.append((pod_name, claim, drivers))
        async with self._lock:
            batches: dict[str, list[_Entry]] = {}
            for _, claim, drivers in claims:
                cm = claim.metadata
                assert cm is not None and cm.uid and cm.name and cm.namespace
                key = f"{cm.namespace}/{cm.name}"
                entry = self._cache.get(key)
                if entry is not None and entry.uid != cm.uid:
                    raise pods.PrepareError(
                        f"old ResourceClaim with same name {cm.name} and "
                        f"different UID {entry.uid} still exists (previous "
                        "pod force-deleted?!)"
                    )
                if entry is None:
                    entry = _Entry(
                        uid=cm.uid,
                        name=cm.name,
                        namespace=cm.namespace,
                        pod_uids=set(),
                        drivers=drivers,
                        devices={},
                    )
                    self._cache[key] = entry
                entry.pod_uids.add(meta.uid)
                if not entry.prepared:
                    for d in drivers:
                        batches.setdefault(d, []).append(entry)
            await asyncio.to_thread(self._save)
        # The calls run outside the cache lock, as in the kubelet: pods prepare concurrently
        # (a workload's claim may wait in its plugin for the daemon pod's claim on this node).
        for driver, entries in batches.items():
            await self._call_prepare(driver, entries)
        async with self._lock:
            for entries in batches.values():
                for e in entries:
                    e.prepared = True
            await asyncio.to_thread(self._save)
        out: Prepared = {}
        for pod_name, claim, _ in claims:
            cm = claim.metadata
            assert cm is not None
            entry = self._cache[f"{cm.namespace}/{cm.name}"]
            out[pod_name] = [
                (list(dev.get("RequestNames") or []), list(dev["CDIDeviceIDs"]))
                for devs in entry.devices.values()
                for dev in devs
            ]
        return out

    def _stubs(self, driver: str) -> tuple[_Plugin, Any, Any]:
        plugin = self._plugins.get(driver)
        if plugin is None:
            raise pods.PrepareError(f"DRA driver {driver} is not registered")
        if plugin.version == "v1":
            return plugin, v1, v1_grpc.DRAPluginStub(plugin.channel)
        return plugin, v1beta1, v1beta1_grpc.DRAPluginStub(plugin.channel)

    async def _call_prepare(self, driver: str, entries: list[_Entry]) -> None:
        _, pb, stub = self._stubs(driver)
        req = pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace=e.namespace, uid=e.uid, name=e.name) for e in entries]
        )
        try:
            resp = await stub.NodePrepareResources(req, timeout=self._s.call_timeout_s)
        except grpc.aio.AioRpcError as err:
            raise pods.PrepareError(
                f"NodePrepareResources: rpc error: code = {err.code().name} desc = {err.details()}"
            ) from err
        by_uid = {e.uid: e for e in entries}
        for uid in resp.claims:
            if uid not in by_uid:
                raise pods.PrepareError(
                    f"NodePrepareResources returned result for unknown claim UID {uid}"
                )
        for uid, result in resp.claims.items():
            if result.error:
                raise pods.PrepareError(
                    f"NodePrepareResources failed for ResourceClaim "
                    f"{by_uid[uid].name}: {result.error}"
                )
        if len(resp.claims) < len(entries):
            raise pods.PrepareError(
                f"NodePrepareResources skipped {len(entries) - len(resp.claims)} ResourceClaims"
            )
        for uid, result in resp.claims.items():
            by_uid[uid].devices.setdefault(driver, []).extend(
                {
                    "PoolName": d.pool_name,
                    "DeviceName": d.device_name,
                    "RequestNames": list(d.request_names),
                    "CDIDeviceIDs": list(d.cdi_device_ids),
                }
                for d in result.devices
            )

    # ---- unprepare ----

    async def unprepare(self, pod: Pod) -> None:
        """Release the pod's claims; retried with back-off until the plugin succeeds."""
        uid = pod.metadata.uid if pod.metadata else None
        if uid:
            await self._unprepare_pod_uid(uid, retry=True)

    async def _unprepare_pod_uid(self, pod_uid: str, retry: bool) -> None:
        delay = 1.0
        while True:
            try:
                await self._unprepare_once(pod_uid)
                return
            except pods.PrepareError as err:
                self._log.warning("unprepare dynamic resources: %s", err)
                if not retry:
                    return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    async def _unprepare_once(self, pod_uid: str) -> None:
        async with self._lock:
            batches: dict[str, list[_Entry]] = {}
            for entry in list(self._cache.values()):
                if pod_uid not in entry.pod_uids:
                    continue
                if len(entry.pod_uids) > 1:
                    entry.pod_uids.discard(pod_uid)
                    continue
                for d in entry.drivers:
                    batches.setdefault(d, []).append(entry)
            await asyncio.to_thread(self._save)
        # Calls outside the lock (see prepare); the entries go once every driver agreed.
        for driver, entries in batches.items():
            _, pb, stub = self._stubs(driver)
            req = pb.NodeUnprepareResourcesRequest(
                claims=[pb.Claim(namespace=e.namespace, uid=e.uid, name=e.name) for e in entries]
            )
            try:
                resp = await stub.NodeUnprepareResources(req, timeout=self._s.call_timeout_s)
            except grpc.aio.AioRpcError as err:
                raise pods.PrepareError(
                    f"NodeUnprepareResources: rpc error: code = "
                    f"{err.code().name} desc = {err.details()}"
                ) from err
            for e in entries:
                result = resp.claims.get(e.uid)
                if result is not None and result.error:
                    raise pods.PrepareError(
                        f"NodeUnprepareResources failed for ResourceClaim {e.name}: {result.error}"
                    )
        async with self._lock:
            for entries in batches.values():
                for e in entries:
                    self._cache.pop(f"{e.namespace}/{e.name}", None)
            await asyncio.to_thread(self._save)

    async def _sweep_vanished(self) -> None:
        active = self.active_pods()
        stale = {p for e in self._cache.values() for p in e.pod_uids} - active
        for pod_uid in stale:
            with contextlib.suppress(pods.PrepareError):
                await self._unprepare_pod_uid(pod_uid, retry=False)

    # ---- CDI for the runtime ----

    def resolve_cdi(
        self, ids: list[str], env: dict[str, str], mounts: list[runtime.Mount]
    ) -> tuple[dict[str, str], list[runtime.DeviceNode], list[runtime.Mount]]:
        """A container's env, device nodes and mounts with CDI devices ``ids`` injected
        from the node's spec folders (``kubelet.cdi``).

        The same device can come twice: after a reboot the kubelet re-prepares a claim whose
        checkpointed entry still lists the devices of the earlier boot, and appends the new
        ones (1.34's ``ClaimInfo.addDevice``); the runtime injects it once.
        """
        return cdi.resolve(self._s.root, ids, env=env, mounts=mounts)
