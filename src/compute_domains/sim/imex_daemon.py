"""The simulated ``nvidia-imex`` daemon: start-up, peer server, links, signals, shutdown.

Start-up follows the real daemon's order and log lines: config summary, host-name notices, node
identification (first nodes-file entry whose address is one of ours; otherwise the real "No
matching network interface" error and exit 1), IMEX session, peer port bound on the bind address
(a port still held by a leftover process fails start-up with "Address already in use"), command
service, then one outgoing link per listed node (itself included). The local state is ``READY``
as soon as that is done; it never waits for peers (``IMEX_WAIT_FOR_QUORUM`` recovery is not
simulated: there is no persistence file).

Signals: SIGTERM/SIGINT/SIGQUIT notify every connected peer and every listed peer's address
(``imex_peers.announce_shutdown``: whoever holds it now, upstream #1447) and exit 0; SIGUSR1,
honoured at most once per ``reload_interval`` (5 s), restarts all outgoing links, re-resolving
names, while the node ID and instance stay the same; SIGHUP re-reads the fault flags.

"Local addresses" are a setting (``--local-address``): simulated pods share the host's loopback
interface, so every 127.x address is local to every process. A configured ``BIND_INTERFACE_IP``
is the only candidate (as for the real daemon); otherwise the ``--local-address`` values; without
them ``IMEX_CMD_BIND_INTERFACE_IP`` (the pod IP, as the compute-domain daemon renders it).

Not simulated: daemonizing (``DAEMONIZE=1`` logs a warning and stays in the foreground), log
rotation, the statistics file, authentication, and GPU memory import/export itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import functools
import ipaddress
import os
import random
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from compute_domains.sim import imex_cmd, imex_config, imex_links, imex_log, imex_peers
from compute_domains.sim.imex_wire import LocalState


class ImexDaemon:
    """One simulated daemon process; :meth:`run` returns its exit status."""

    def __init__(
        self,
        options: imex_config.ImexOptions,
        *,
        rng: random.Random | None = None,
        stream: TextIO | None = None,
        own_signals: bool = True,
        paths: Callable[[Path], Path] | None = None,
    ) -> None:
        """Args: options: the command line's; rng: backoff jitter; stream: where the log goes
        without a log file (stderr by default); own_signals: install the process's signal
        handlers (False when it runs in a process of others: :meth:`deliver` then); paths:
        where this process opens a file its config names (as named, in its own process)."""
        self._opts = options
        self._paths = paths
        self._stream = stream if stream is not None else sys.stderr
        self._own_signals = own_signals
        self._handlers: dict[int, Callable[[], None]] = {}
        self._rng = rng or random.Random()
        self._state = LocalState.INITIALIZING
        self._stop = asyncio.Event()
        self._links: list[imex_links.OutgoingLink] = []
        self._last_reload: float | None = None
        self._faults = imex_config.Faults()
        self._session_fd: int | None = None
        self._node_id = -1
        self._entries: list[str] = []
        self._log = imex_log.ImexLog(self._stream)

    @property
    def _version(self) -> str:
        return "NO_GPU" if self._opts.nogpu else self._opts.version

    async def run(self) -> int:
        """Run until a stop signal; 0 after a clean shutdown, 1 when start-up fails."""
        try:
            config = imex_config.load_config(self._opts.config_path)
        except OSError as err:
            self._log.error(f"Failed to open config file {self._opts.config_path}: {err.strerror}")
            return 1
        if self._opts.port is not None:
            config = dataclasses.replace(config, server_port=self._opts.port)
        if self._paths is not None:
            config = dataclasses.replace(
                config,
                node_config_file=self._paths(config.node_config_file),
                log_file_name=config.log_file_name and str(self._paths(Path(config.log_file_name))),
                cmd_unix_path=config.cmd_unix_path and str(self._paths(Path(config.cmd_unix_path))),
                fault_dir=config.fault_dir and self._paths(config.fault_dir),
            )
        log = imex_log.open_log(
            config.log_file_name,
            append=config.log_append,
            level=config.log_level,
            stream=self._stream,
        )
        self._log = log
        try:
            return await self._serve(config, log)
        finally:
            if self._session_fd is not None:
                os.close(self._session_fd)
            log.close()

    async def _serve(self, config: imex_config.ImexConfig, log: imex_log.ImexLog) -> int:
        imex_log.config_summary(log, config, version=self._opts.version, nogpu=self._opts.nogpu)
        resolver = imex_config.Resolver(self._opts.hosts_file)
        try:
            self._entries = imex_config.read_nodes_file(config.node_config_file)
        except OSError:
            log.error(f"Failed to read node configuration file {config.node_config_file}.")
            return 1
        for entry in self._entries:
            if not imex_config.is_ip(entry):
                log.info(f"Treating node config entry '{entry}' as a host name.")
        identified = await self._identify(config, resolver)
        if identified is None:
            log.error(
                "No matching network interface found for any IP addresses in the node "
                f"configuration file {config.node_config_file}."
            )
            return 1
        self._node_id, bind_ip = identified
        entry = self._entries[self._node_id]
        if imex_config.is_ip(entry):
            log.info(
                f"Identified this node as ID {self._node_id}, using bind IP of '{bind_ip}', "
                "and network interface of lo"
            )
        else:
            log.info(f"Identified this node as ID {self._node_id}, using bind address of '{entry}'")
        log.info(
            "nvidia-imex persistence file /var/run/nvidia-imex/persist.dat does not exist.  "
            "Assuming no previous importers."
        )
        self._faults = imex_config.read_faults(config, self._opts.fault_dir)
        if self._faults.session_in_use or not self._take_session():
            log.error("NV_ERR_IN_USE Failed to allocate Imex session")
            return 1
        if not self._opts.nogpu:
            log.info("NvGpu Library version matched with GPU Driver version")
        peers = imex_peers.PeerServer(
            node_id=self._node_id,
            entries=self._entries,
            version=self._version,
            log=log,
            hanging=lambda: self._faults.hang,
            on_hello=self._peer_seen,
            on_shutdown=self._peer_left,
        )
        servers = await self._bind(config, bind_ip, resolver, peers, log)
        if servers is None:
            return 1
        instance = os.urandom(16).hex()  # what tells a restart apart (uuid costs a start ~3 ms)
        ctx = imex_links.LinkContext(
            node_id=self._node_id,
            instance=instance,
            entries=tuple(self._entries),
            version=self._version,
            server_port=config.server_port,
            bind_ip=bind_ip,
            grace_time=config.disconnected_grace_time,
            resolver=resolver,
            log=log,
            faults=lambda: self._faults,
            rng=self._rng,
            ping_interval=self._opts.ping_interval,
            ping_timeout=self._opts.ping_timeout,
            ping_phase=self._rng.uniform(0.0, self._opts.ping_interval),
        )
        self._links = [imex_links.OutgoingLink(ctx, k) for k in range(len(self._entries))]
        self._install_signals(config, log)
        for _ in range(3):
            log.info("Started processing of incoming messages.")
        log.info(f"Creating gRPC channels to all peers (nPeers = {len(self._entries)}).")
        log.info(
            "IMEX_WAIT_FOR_QUORUM != FULL, continuing initialization without waiting for "
            "connections to all nodes."
        )
        self._state = LocalState.READY
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [
                    tg.create_task(link.run(), name=f"imex-link-{link.target}")
                    for link in self._links
                ]
                await self._stop.wait()
                self._state = LocalState.SHUTTING_DOWN
                for server in servers:
                    server.close()  # no new links while peers are told we are leaving
                await asyncio.gather(
                    peers.notify_shutdown(instance), imex_peers.announce_shutdown(ctx)
                )
                for task in tasks:
                    task.cancel()
        except asyncio.CancelledError:
            # Killed (in-process): like a process's sockets, the open links break at once.
            peers.abort()
            raise
        finally:
            for server in servers:
                server.close()
            if config.cmd_unix_path:
                with contextlib.suppress(OSError):
                    os.unlink(config.cmd_unix_path)
        log.info("IMEX daemon shut down.")
        return 0

    async def _identify(
        self, config: imex_config.ImexConfig, resolver: imex_config.Resolver
    ) -> tuple[int, str] | None:
        if config.bind_interface_ip:
            local = {config.bind_interface_ip}
        elif self._opts.local_addresses:
            local = set(self._opts.local_addresses)
        else:
            local = {config.cmd_bind_ip} - {""}
        wanted = {ipaddress.ip_address(a) for a in local if imex_config.is_ip(a)}
        for node_id, entry in enumerate(self._entries):
            address = await resolver.resolve(entry)
            if address is not None and ipaddress.ip_address(address) in wanted:
                return node_id, address
        return None

    def _take_session(self) -> bool:
        path = self._opts.session_file
        if path is None:
            return True
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._session_fd = fd
        return True

    async def _bind(
        self,
        config: imex_config.ImexConfig,
        bind_ip: str,
        resolver: imex_config.Resolver,
        peers: imex_peers.PeerServer,
        log: imex_log.ImexLog,
    ) -> list[asyncio.Server] | None:
        servers: list[asyncio.Server] = []
        cmd = imex_cmd.CommandService(
            node_id=self._node_id,
            entries=self._entries,
            cmd_port=config.cmd_port,
            resolver=resolver,
            row=self._row,
            hanging=lambda: self._faults.hang,
            peer_timeout=self._opts.peer_query_timeout,
        )
        what = f"{bind_ip}:{config.server_port}"
        try:
            servers.append(await asyncio.start_server(peers.handle, bind_ip, config.server_port))
            if config.cmd_enabled and config.cmd_port is not None:
                what = f"{config.cmd_bind_ip or '0.0.0.0'}:{config.cmd_port}"
                host = config.cmd_bind_ip or None
                servers.append(await asyncio.start_server(cmd.handle, host, config.cmd_port))
            if config.cmd_enabled and config.cmd_unix_path:
                what = config.cmd_unix_path
                servers.append(await asyncio.start_unix_server(cmd.handle, config.cmd_unix_path))
        except OSError as err:
            reason = os.strerror(err.errno) if err.errno else str(err)
            log.error(f"Failed to bind to {what}: {reason}")
            for server in servers:
                server.close()
            return None
        return servers

    def _install_signals(self, config: imex_config.ImexConfig, log: imex_log.ImexLog) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            self._handlers[sig] = functools.partial(self._on_stop_signal, sig, log)
        self._handlers[signal.SIGUSR1] = functools.partial(self._on_reload, log)
        self._handlers[signal.SIGHUP] = functools.partial(self._on_hup, config, log)
        if self._own_signals:
            loop = asyncio.get_running_loop()
            for signum, handler in self._handlers.items():
                loop.add_signal_handler(signum, handler)

    def _peer_seen(self, node_id: int) -> None:
        if 0 <= node_id < len(self._links):
            self._links[node_id].peer_seen()

    def _peer_left(self, node_id: int, instance: str) -> None:
        if 0 <= node_id < len(self._links):
            self._links[node_id].peer_left(instance)

    def deliver(self, sig: int) -> bool:
        """Handle ``sig`` as if the process had received it; False when it would have been
        ignored (before the handlers are in place, or a signal it does not handle)."""
        handler = self._handlers.get(sig)
        if handler is None:
            return False
        handler()
        return True

    def _on_stop_signal(self, sig: signal.Signals, log: imex_log.ImexLog) -> None:
        if self._faults.hang:
            return
        log.info(f"Received signal {sig.name}, shutting down IMEX daemon")
        self._stop.set()

    def _on_reload(self, log: imex_log.ImexLog) -> None:
        if self._faults.hang:
            return
        now = asyncio.get_running_loop().time()
        if self._last_reload is not None and now - self._last_reload < self._opts.reload_interval:
            log.info(
                f"SIGUSR1 received less than {self._opts.reload_interval:g} seconds after the "
                "previous one; ignoring it"
            )
            return
        self._last_reload = now
        log.info("SIGUSR1 received: re-establishing all outgoing connections")
        for link in self._links:
            link.restart()

    def _on_hup(self, config: imex_config.ImexConfig, log: imex_log.ImexLog) -> None:
        log.info("SIGHUP received: flushing the verbose log buffer")
        self._faults = imex_config.read_faults(config, self._opts.fault_dir)
        for link in self._links:
            link.poke()

    def _row(self) -> dict[str, Any]:
        return {
            "t": "status",
            "node": self._node_id,
            "state": self._state.value,
            "host": self._entries[self._node_id],
            "version": self._version,
            "connections": {str(link.target): link.state.value for link in self._links},
        }
