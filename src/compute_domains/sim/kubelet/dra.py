"""The kubelet's DRA manager on a simulated node (Kubernetes 1.34 semantics).

``DraManager`` ties the DRA roles together: plugin registration (``registration``, reconciled
every second), which claims a pod needs (``claims``), the claim cache and its checkpoint
(``claimcache``) and the calls into plugins (``draplugin``). Preparing a pod's claims adds the
pod to each claim's cache entry, then calls ``NodePrepareResources`` once per driver for the
claims not prepared yet (45 s deadline), outside the cache lock as the kubelet does, so pods
prepare concurrently. Unprepare happens when the last pod using a claim goes, and from a
periodic reconcile for pods that vanished (also after an agent restart). It also gives the
runtime its CDI step (``resolve_cdi``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.containers import runtime
from compute_domains.sim.kubelet import (
    cdi,
    claimcache,
    claims,
    config,
    draplugin,
    errors,
    registration,
)

logger = logging.getLogger(__name__)

Prepared = dict[str, list[tuple[list[str], list[str]]]]
"""Pod claim name → [(request names, CDI device ids)] of each prepared device."""


class DraManager:
    """Plugin registry and claim cache of one node."""

    def __init__(
        self,
        settings: config.DraSettings,
        client: AsyncClient,
        active_pods: Callable[[], set[str]] | None = None,
    ) -> None:
        self._s = settings
        self._client = client
        self.active_pods = active_pods or set
        self._log = logging.LoggerAdapter(logger, {"node": settings.node})
        self._plugins = registration.PluginRegistry(settings.root, self._log)
        self._cache = claimcache.ClaimCache(settings.root, self._log)

    def registered_drivers(self) -> list[str]:
        """The DRA drivers this node's kubelet has registered (so can call) now."""
        return self._plugins.drivers()

    async def run(self) -> None:
        """Reconcile plugin sockets and vanished pods until cancelled."""
        loop = asyncio.get_running_loop()
        # The first sweep waits a period, as the kubelet's reconcile waits for its pod sources:
        # right after a (re)start no pod worker exists yet, and the sweep would unprepare the
        # claims of every pod still bound here, racing the workers that prepare them again.
        last_pod_sweep = loop.time()
        try:
            while True:
                await self._plugins.reconcile()
                if loop.time() - last_pod_sweep >= self._s.reconcile_s:
                    last_pod_sweep = loop.time()
                    await self._sweep_vanished()
                await asyncio.sleep(1.0)
        finally:
            await self._plugins.close()

    # ---- prepare ----

    async def prepare(self, pod: Pod) -> Prepared:
        """Prepare every claim of the pod; pod claim name → [(request names, CDI ids)]."""
        meta = pod.metadata
        assert meta is not None and meta.uid
        checked = await claims.resolve(self._client, pod, self._plugins.get)
        cache = self._cache
        async with cache.lock:
            batches: dict[str, list[claimcache.ClaimInfo]] = {}
            for pc in checked:
                cm = pc.claim.metadata
                assert cm is not None and cm.uid and cm.name and cm.namespace
                key = f"{cm.namespace}/{cm.name}"
                entry = cache.entries.get(key)
                if entry is not None and entry.uid != cm.uid:
                    raise errors.PrepareError(
                        f"old ResourceClaim with same name {cm.name} and "
                        f"different UID {entry.uid} still exists (previous "
                        "pod force-deleted?!)"
                    )
                if entry is None:
                    entry = claimcache.ClaimInfo(
                        uid=cm.uid,
                        name=cm.name,
                        namespace=cm.namespace,
                        pod_uids=set(),
                        drivers=pc.drivers,
                        devices={},
                    )
                    cache.entries[key] = entry
                entry.pod_uids.add(meta.uid)
                if not entry.prepared:
                    for d in pc.drivers:
                        batches.setdefault(d, []).append(entry)
            await asyncio.to_thread(cache.save)
        # The calls run outside the cache lock, as in the kubelet: pods prepare concurrently
        # (a workload's claim may wait in its plugin for the daemon pod's claim on this node).
        for driver, entries in batches.items():
            plugin = self._plugins.get(driver)
            devices = await draplugin.prepare(plugin, entries, self._s.call_timeout_s)
            by_uid = {e.uid: e for e in entries}
            for uid, devs in devices.items():
                by_uid[uid].devices.setdefault(driver, []).extend(devs)
        async with cache.lock:
            for entries in batches.values():
                for e in entries:
                    e.prepared = True
            await asyncio.to_thread(cache.save)
        out: Prepared = {}
        for pc in checked:
            cm = pc.claim.metadata
            assert cm is not None
            entry = cache.entries[f"{cm.namespace}/{cm.name}"]
            out[pc.pod_claim] = [
                (list(dev.get("RequestNames") or []), list(dev["CDIDeviceIDs"]))
                for devs in entry.devices.values()
                for dev in devs
            ]
        return out

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
            except errors.PrepareError as err:
                self._log.warning("unprepare dynamic resources: %s", err)
                if not retry:
                    return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    async def _unprepare_once(self, pod_uid: str) -> None:
        cache = self._cache
        async with cache.lock:
            batches: dict[str, list[claimcache.ClaimInfo]] = {}
            for entry in list(cache.entries.values()):
                if pod_uid not in entry.pod_uids:
                    continue
                if len(entry.pod_uids) > 1:
                    entry.pod_uids.discard(pod_uid)
                    continue
                for d in entry.drivers:
                    batches.setdefault(d, []).append(entry)
            await asyncio.to_thread(cache.save)
        # Calls outside the lock (see prepare); the entries go once every driver agreed.
        for driver, entries in batches.items():
            plugin = self._plugins.get(driver)
            await draplugin.unprepare(plugin, entries, self._s.call_timeout_s)
        async with cache.lock:
            for entries in batches.values():
                for e in entries:
                    cache.entries.pop(f"{e.namespace}/{e.name}", None)
            await asyncio.to_thread(cache.save)

    async def _sweep_vanished(self) -> None:
        active = self.active_pods()
        stale = {p for e in self._cache.entries.values() for p in e.pod_uids} - active
        for pod_uid in stale:
            with contextlib.suppress(errors.PrepareError):
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
