"""DRA plugin registration on a simulated node, as the kubelet's plugin watcher does it.

Sockets in the node's ``plugins_registry`` are found by ``reconcile``, which the DRA manager
calls every second (the real kubelet's reconciler period). A new socket is registered with
``GetInfo`` → version choice (the plugin's first of ``v1.DRAPlugin``/``v1beta1.DRAPlugin``) →
``NotifyRegistrationStatus``; a plugin of another type, or offering neither service, is told
why it was refused. A socket's identity is its inode: one deleted and re-created between two
passes is deregistered and registered again, as the kubelet's fsnotify watcher would see it.
A driver stays registered while any of its sockets does. A socket whose registration failed is
tried again after the kubelet's operation back-off (0.5 s, doubling, at most 2 min 2 s), not at
every pass: on a loaded sim, a retry each second per node was a storm that kept the plugins
from answering (1,832 failed registrations while 288 virtual nodes started).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import grpc

from compute_domains._proto.pluginregistration.v1 import api_pb2 as reg
from compute_domains._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from compute_domains.infra import backoff
from compute_domains.sim.kubelet import draplugin, errors

REGISTRY_DIR = "var/lib/kubelet/plugins_registry"
"""The registration sockets' folder under the node root."""
RETRY = backoff.Backoff(initial=0.5, maximum=122.0, factor=2.0, jitter=0.0)
"""The kubelet's back-off between attempts of a failed plugin registration."""


class PluginRegistry:
    """The DRA plugins registered on one node."""

    def __init__(
        self,
        root: Path,
        log: logging.LoggerAdapter[logging.Logger],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._root = root
        self._log = log
        self._clock = clock
        self._failed: dict[Path, tuple[int, float]] = {}
        """Socket → (failed attempts, when the next one may start)."""
        self._plugins: dict[str, draplugin.Plugin] = {}
        self._sockets: dict[Path, str] = {}
        self._identity: dict[Path, tuple[int, int]] = {}
        self._listed_mtime: int | None = None
        """The folder's mtime at the last full pass, when old enough to trust."""

    def drivers(self) -> list[str]:
        """The names of the DRA drivers registered now."""
        return sorted(self._plugins)

    def get(self, driver: str) -> draplugin.Plugin:
        """The registered plugin of ``driver``.

        Raises:
            errors.PrepareError: no plugin of that driver is registered.
        """
        plugin = self._plugins.get(driver)
        if plugin is None:
            raise errors.PrepareError(f"DRA driver {driver} is not registered")
        return plugin

    async def reconcile(self) -> None:
        """One pass over the registration folder: drop gone or replaced sockets, add new ones."""
        found = {}
        folder = self._root / REGISTRY_DIR
        # A socket added, removed or replaced changes the folder's mtime. Nothing changed and
        # no retry due: nothing to do, without listing the folder (1,152 nodes do this every
        # second). Only an mtime a second old is trusted: the file system's clock is coarse,
        # and a change in the same tick as the last pass would otherwise go unseen.
        with contextlib.suppress(OSError):
            mtime = os.stat(folder).st_mtime_ns
            if mtime == self._listed_mtime and not self._failed:
                return
            self._listed_mtime = mtime if time.time_ns() - mtime > 1_000_000_000 else None
        # scandir, not Path.glob: every node runs this each second (1,152 times a second).
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISSOCK(st.st_mode):
                        found[folder / entry.name] = (st.st_ino, st.st_ctime_ns)
        for sock in list(self._sockets):
            if found.get(sock) != self._identity.get(sock):
                await self._deregister(sock)
        for sock in list(self._failed):
            if sock not in found:
                del self._failed[sock]
        now = self._clock()
        for sock, ident in found.items():
            if sock not in self._sockets:
                if self._identity.get(sock, ident) != ident:
                    self._failed.pop(sock, None)  # a new socket at that path: no back-off
                self._identity[sock] = ident
                attempts, not_before = self._failed.get(sock, (0, now))
                if now < not_before:
                    continue
                if not await self._register(sock):
                    delay = RETRY.base_delay(attempts)
                    self._failed[sock] = (attempts + 1, self._clock() + delay)
                else:
                    self._failed.pop(sock, None)

    async def close(self) -> None:
        """Close every plugin's channel."""
        for p in self._plugins.values():
            await p.channel.close()

    async def _register(self, sock: Path) -> bool:
        """One registration attempt; False when the plugin did not answer (retried later)."""
        try:
            async with grpc.aio.insecure_channel(f"unix:{sock}") as ch:
                stub = cast("reg_grpc.RegistrationAsyncStub", reg_grpc.RegistrationStub(ch))
                info = await stub.GetInfo(reg.InfoRequest(), timeout=1.0)
                error = ""
                version = next(
                    (
                        draplugin.SERVICES[v]
                        for v in info.supported_versions
                        if v in draplugin.SERVICES
                    ),
                    "",
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
            return False
        self._sockets[sock] = info.name
        if error:
            self._log.warning("%s", error)
            return True
        endpoint = Path(info.endpoint) if info.endpoint else sock
        host_endpoint = self._root / str(endpoint).lstrip("/")
        channel = grpc.aio.insecure_channel(f"unix:{host_endpoint}")
        old = self._plugins.get(info.name)
        self._plugins[info.name] = draplugin.Plugin(info.name, host_endpoint, version, channel)
        if old is not None:
            await old.channel.close()
        self._log.info("registered DRA plugin %s (%s) at %s", info.name, version, host_endpoint)
        return True

    async def _deregister(self, sock: Path) -> None:
        driver = self._sockets.pop(sock, "")
        self._identity.pop(sock, None)
        plugin = self._plugins.get(driver)
        if plugin is not None and driver not in self._sockets.values():
            del self._plugins[driver]
            await plugin.channel.close()
            self._log.info("deregistered DRA plugin %s", driver)
