"""Inputs of the simulated nvidia-imex: options, config file, nodes file, name resolution, faults.

``ImexOptions`` are the daemon's command-line settings (``imex`` parses them).

The config is IMEX's ``KEY=value`` format (``#`` comments, blank lines, empty value = unset), read
once at start with IMEX's defaults for missing keys. The nodes file lists one address or host name
per line; node IDs follow line order. Blank lines and ``#`` lines are skipped and only the first
token of a line counts (the real daemon's handling of these is undocumented).

Host names resolve through a hosts file whose path is a setting (a simulated container has its own
``/etc/hosts``), read afresh on every lookup as the real resolver does; without one, the system
resolver is used. The first matching line wins, as in glibc.

Fault injection (simulator only) comes from sim-only config keys, read once at start, and from a
flags folder, read at start and again on every SIGHUP:

======================  ==========================  ============================================
config key              file in the flags folder    effect
======================  ==========================  ============================================
SIM_FAULT_SESSION_IN_USE  ``session-in-use``        refuse to start: ``NV_ERR_IN_USE`` (as if a
                                                    host service held the node's IMEX session)
SIM_FAULT_HANG          ``hang``                    stop answering commands and peer pings, and
                                                    ignore SIGTERM/SIGUSR1 (only SIGKILL ends it)
SIM_FAULT_DROP_LINKS    ``drop-link-<id>`` or       drop (and do not re-open) the outgoing link
(``1,2`` or ``all``)    ``drop-link-all``           to those node IDs
SIM_FAULT_DIR           (the folder itself)         where the flag files live
======================  ==========================  ============================================
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket
from collections.abc import Mapping
from pathlib import Path

from compute_domains.sim import imex_query

DEFAULT_NODES_CONFIG = imex_query.DEFAULT_NODES_CONFIG


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ImexOptions:
    """Command-line settings of one simulated daemon."""

    config_path: Path
    """``-c``: the daemon config file."""
    nogpu: bool = False
    """``--nogpu``: NO GPU mode; peers and ``-N`` see the version ``NO_GPU``."""
    port: int | None = None
    """``-p``: overrides ``SERVER_PORT``."""
    hosts_file: Path | None = None
    """Hosts file for name resolution; None uses the system resolver."""
    local_addresses: tuple[str, ...] = ()
    """Addresses of this simulated node's interfaces."""
    fault_dir: Path | None = None
    """Folder of fault flag files (see ``imex_config``); re-read on SIGHUP."""
    session_file: Path | None = None
    """Lock file standing for the node's single IMEX session (held while running)."""
    version: str = "595.71.05"
    """The IMEX version this stand-in claims (``--version``, peer version check)."""
    reload_interval: float = 5.0
    """Seconds within which a second SIGUSR1 is ignored."""
    ping_interval: float = 1.0
    """Seconds between an idle peer link's pings (``imex_links``)."""
    ping_timeout: float = 4.0
    """Seconds without a pong after which a link counts its peer as hung."""
    peer_query_timeout: float = 4.0
    """Seconds to wait for a peer's command port during a domain query (a live real peer
    answers in milliseconds; simulated ones on a starved 2-core machine can take seconds,
    which made formed domains flap DEGRADED; stays under the ctl's usual ``-t 5000``)."""


parse_config_text = imex_query.parse_config_text
_int = imex_query.config_int
_flag = imex_query.config_flag


def _node_ids(spec: str) -> frozenset[int] | None:
    """``"1,2"`` → {1, 2}; ``"all"`` → None (every node); empty → empty set."""
    if spec.strip().lower() == "all":
        return None
    return frozenset(int(p) for p in spec.replace(" ", "").split(",") if p.isdigit())


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ImexConfig:
    """The settings of one daemon, from its config file with IMEX's defaults."""

    path: Path
    values: Mapping[str, str]
    log_level: int = 4
    log_file_name: str = "/var/log/nvidia-imex.log"
    log_append: bool = True
    daemonize: bool = True
    bind_interface_ip: str = ""
    server_port: int = 50000
    node_config_file: Path = Path(DEFAULT_NODES_CONFIG)
    wait_for_quorum: str = "RECOVERY"
    cmd_enabled: bool = True
    cmd_bind_ip: str = ""
    cmd_port: int | None = 50005
    cmd_unix_path: str = ""
    disconnected_grace_time: int = -1
    fault_session_in_use: bool = False
    fault_hang: bool = False
    fault_drop_links: frozenset[int] | None = frozenset()
    fault_dir: Path | None = None

    @classmethod
    def from_values(cls, path: Path, values: Mapping[str, str]) -> ImexConfig:
        """Build from parsed ``KEY=value`` pairs, defaulting every missing key as IMEX does."""
        cmd_enabled, cmd_bind_ip, cmd_port, cmd_unix_path = imex_query.cmd_fields(values)
        fault_dir = values.get("SIM_FAULT_DIR", "")
        return cls(
            path=path,
            values=dict(values),
            log_level=_int(values, "LOG_LEVEL", 4),
            log_file_name=values.get("LOG_FILE_NAME", "/var/log/nvidia-imex.log"),
            log_append=_flag(values, "LOG_APPEND_TO_LOG", True),
            daemonize=_flag(values, "DAEMONIZE", True),
            bind_interface_ip=values.get("BIND_INTERFACE_IP", ""),
            server_port=_int(values, "SERVER_PORT", 50000),
            node_config_file=Path(imex_query.nodes_config_file(values)),
            wait_for_quorum=values.get("IMEX_WAIT_FOR_QUORUM", "RECOVERY") or "RECOVERY",
            cmd_enabled=cmd_enabled,
            cmd_bind_ip=cmd_bind_ip,
            cmd_port=cmd_port,
            cmd_unix_path=cmd_unix_path,
            disconnected_grace_time=_int(values, "IMEX_NODE_DISCONNECTED_GRACE_TIME", -1),
            fault_session_in_use=_flag(values, "SIM_FAULT_SESSION_IN_USE", False),
            fault_hang=_flag(values, "SIM_FAULT_HANG", False),
            fault_drop_links=_node_ids(values.get("SIM_FAULT_DROP_LINKS", "")),
            fault_dir=Path(fault_dir) if fault_dir else None,
        )


def load_config(path: Path) -> ImexConfig:
    """Read and parse the config file at ``path``.

    Raises:
        OSError: The file cannot be read.
    """
    return ImexConfig.from_values(path, parse_config_text(path.read_text()))


def read_nodes_file(path: Path) -> list[str]:
    """The node entries in file order (node ID = position).

    Raises:
        OSError: The file cannot be read.
    """
    return imex_query.node_entries(path.read_text())


def is_ip(entry: str) -> bool:
    """Whether ``entry`` is an IPv4/IPv6 literal (not a host name)."""
    try:
        ipaddress.ip_address(entry)
    except ValueError:
        return False
    return True


def _hosts_lines(hosts_file: Path) -> list[list[str]]:
    try:
        text = hosts_file.read_text()
    except OSError:
        return []
    rows = []
    for raw in text.splitlines():
        fields = raw.split("#", 1)[0].split()
        if len(fields) >= 2:
            rows.append(fields)
    return rows


class Resolver:
    """Names → addresses through a hosts file (or the system resolver when there is none)."""

    def __init__(self, hosts_file: Path | None) -> None:
        self._hosts_file = hosts_file
        self._rows: list[list[str]] = []
        self._seen: tuple[int, int, int] | None = None

    def _hosts(self, hosts_file: Path) -> list[list[str]]:
        # Every link re-resolves on every attempt; the file is read again only when it changed
        # (inode, size or mtime), as a re-written hosts file always does.
        try:
            st = hosts_file.stat()
        except OSError:
            self._seen = None
            return []
        seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        if seen != self._seen:
            self._rows, self._seen = _hosts_lines(hosts_file), seen
        return self._rows

    async def resolve(self, entry: str) -> str | None:
        """The IPv4/IPv6 address for a nodes-file entry; None when it does not resolve."""
        if is_ip(entry):
            return entry
        if self._hosts_file is not None:
            wanted = entry.lower()
            for fields in self._hosts(self._hosts_file):
                if wanted in (name.lower() for name in fields[1:]) and is_ip(fields[0]):
                    return fields[0]
            return None
        import asyncio  # here, not at the top: ``nvidia-imex-ctl -q`` never resolves names

        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                entry, None, type=socket.SOCK_STREAM
            )
        except OSError:
            return None
        return str(infos[0][4][0]) if infos else None

    def host_name(self, address: str) -> str | None:
        """The first name the hosts file gives ``address`` (for ``-H``), or None."""
        if self._hosts_file is None:
            try:
                return socket.gethostbyaddr(address)[0]
            except OSError:
                return None
        for fields in self._hosts(self._hosts_file):
            if fields[0] == address:
                return fields[1]
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class Faults:
    """Injected faults in effect now."""

    session_in_use: bool = False
    hang: bool = False
    drop_links: frozenset[int] | None = frozenset()
    """Outgoing links to drop; None means every link."""

    def drops(self, node_id: int) -> bool:
        """Whether the outgoing link to ``node_id`` is to be dropped."""
        return self.drop_links is None or node_id in self.drop_links


def read_faults(config: ImexConfig, fault_dir: Path | None) -> Faults:
    """Faults from the config keys combined with the flag files in ``fault_dir``."""
    drops = config.fault_drop_links
    session = config.fault_session_in_use
    hang = config.fault_hang
    folder = fault_dir or config.fault_dir
    if folder is not None and folder.is_dir():
        names = {p.name for p in folder.iterdir()}
        session = session or "session-in-use" in names
        hang = hang or "hang" in names
        if "drop-link-all" in names:
            drops = None
        elif drops is not None:
            extra = {int(n[10:]) for n in names if n.startswith("drop-link-") and n[10:].isdigit()}
            drops = drops | extra
    return Faults(session_in_use=session, hang=hang, drop_links=drops)
