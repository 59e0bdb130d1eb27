"""Render the IMEX daemon config (``imexd.cfg``) and nodes config (``nodes.cfg``); write atomically.

The IMEX config is a ``KEY=value`` file rendered from a template with Go-template-style fields,
``{{ .Field }}``. The template is either the file the kubelet plugin placed next to the config
(upstream: ``/imexd/imexd.cfg.tmpl``) or :data:`DEFAULT_TEMPLATE`. Fields:

* ``IMEXCmdBindInterfaceIP``: the pod IP; the command service (``nvidia-imex-ctl``) listens there,
  and peers' ``-N`` queries reach it there (binding 127.0.0.1 would break ``-N``).
* ``IMEXDaemonNodesConfigPath``: where the nodes config lives.
* ``IMEXServerPort`` / ``IMEXCmdPort``: peer and command ports (50000 / 50005 by default); an
  upstream template spells the numbers out instead, which renders the same.

Peer traffic binds by matching the nodes file against local addresses (``BIND_INTERFACE_IP`` is
left empty, as upstream does). An unknown field in a template is a ``ConfigError``.

The nodes config in DNS-names mode is static: ``max_nodes`` lines of the IMEX domain's names,
``compute-domain-daemon-<infix>-0000`` … (``dnsnames``: unique per domain), written once per
process start; in IP mode it lists the peers' IPs and is rewritten on change.
Both files are written atomically, so ``nvidia-imex`` never reads half a file.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from compute_domains.daemon import dnsnames
from compute_domains.infra import atomicfile, errors


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ImexFilesSettings:
    """Where the IMEX files live and which ports they name (production defaults)."""

    config_path: Path = Path("/imexd/imexd.cfg")
    """The IMEX daemon config we render; ``nvidia-imex -c`` and ``nvidia-imex-ctl -c`` read it."""

    nodes_config_path: Path = Path("/imexd/nodes.cfg")
    """The node list IMEX reads once at start, where we write it."""

    nodes_config_name: Path | None = None
    """The node list's path written into the config (``IMEX_NODE_CONFIG_FILE``), as IMEX and
    the domain's workloads see it through their mount of the domain folder; None:
    ``nodes_config_path`` (a process sees the files where IMEX does; a daemon hosted in a
    simulator process writes through the node's folder instead)."""

    client_config_path: Path | None = None
    """Where to write a second copy of the config for the domain's workloads (their
    ``nvidia-imex-ctl -c /imexd/imexd.cfg``), naming the node list as
    ``client_nodes_config_name``: for an IMEX whose own view of the domain folder differs from
    its workloads' (a resident agent mounts all the per-CD folders, a workload its CD's at
    ``/imexd``); None: the workloads read ``config_path`` itself."""

    client_nodes_config_name: Path = Path("/imexd/nodes.cfg")
    """The node list as the domain's workloads see it (written into ``client_config_path``)."""

    template_path: Path | None = Path("/imexd/imexd.cfg.tmpl")
    """Template placed by the kubelet plugin; None, or a missing file, uses the built-in one."""

    server_port: int = 50000
    """TCP port for IMEX peer traffic (``SERVER_PORT``)."""

    cmd_port: int = 50005
    """TCP port of the IMEX command service (``IMEX_CMD_PORT``), used by ``nvidia-imex-ctl``."""

    file_mode: int = 0o644
    """Permission bits of both files."""


DEFAULT_TEMPLATE = """\
# nvidia-imex configuration, rendered by the compute-domain daemon at every start.
# IMEX reads this file once at start-up; changes take effect only after a restart.

# Logging: level 4 = INFO; an empty file name sends the log to stderr, which the
# compute-domain daemon captures.
LOG_LEVEL=4
LOG_FILE_NAME=
STATS_FILE_NAME=/var/log/nvidia-imex-stats.log
LOG_APPEND_TO_LOG=0
LOG_FILE_MAX_SIZE=1024
LOG_MAX_ROTATE_COUNT=10
LOG_USE_SYSLOG=0

# Run in the foreground: the compute-domain daemon supervises this process.
DAEMONIZE=0

# Peer traffic. An empty bind address makes IMEX pick the nodes-file entry that is a local address.
BIND_INTERFACE_IP=
SERVER_PORT={{ .IMEXServerPort }}
IMEX_NODE_CONFIG_FILE={{ .IMEXDaemonNodesConfigPath }}
NETWORK_INTERFACE=
IMEX_WAIT_FOR_QUORUM=RECOVERY

# Authentication and encryption between peers (off).
IMEX_ENABLE_AUTH_ENCRYPTION=0
IMEX_AUTH_ENCRYPTION_MODE=SSL_TLS
IMEX_AUTH_SOURCE=
IMEX_SERVER_KEY=
IMEX_SERVER_CERT=
IMEX_SERVER_CERT_AUTH=
IMEX_CLIENT_KEY=
IMEX_CLIENT_CERT=
IMEX_CLIENT_CERT_AUTH=
IMEX_SECURITY_TARGET_OVERRIDE=
IMEX_GSS_SERVICE_NAME=host
IMEX_GSS_TIMEOUT_SEC=30
IMEX_GSS_RETRY_INTERVAL_SEC=5
IMEX_GSS_SEC_CONTEXT_LIFETIME_SEC=-1
IMEX_GSS_SHUTDOWN_ON_FAILURE=0

# Command service for nvidia-imex-ctl, on the pod IP so that peers' -N queries reach it.
IMEX_CMD_ENABLED=1
IMEX_CMD_BIND_INTERFACE_IP={{ .IMEXCmdBindInterfaceIP }}
IMEX_CMD_PORT={{ .IMEXCmdPort }}
IMEX_CMD_UNIX_DOMAIN_PATH=

# Seconds to wait for a lost peer before cleaning up its imports; -1 waits forever.
IMEX_NODE_DISCONNECTED_GRACE_TIME=-1
"""
"""Built-in IMEX config template (used when the plugin-provided template is absent)."""

_FIELD = re.compile(r"\{\{-?\s*\.(\w+)\s*-?\}\}")


def render_template(template: str, fields: Mapping[str, str]) -> str:
    """Substitute ``{{ .Name }}`` fields in ``template``; pure.

    Raises:
        ConfigError: The template names a field not in ``fields``.
    """

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in fields:
            raise errors.ConfigError(f"IMEX config template uses unknown field {name!r}")
        return fields[name]

    return _FIELD.sub(substitute, template)


def render_imex_config(template: str, *, pod_ip: str, settings: ImexFilesSettings) -> str:
    """The IMEX daemon config text for this pod; pure.

    Raises:
        ConfigError: ``pod_ip`` is not an IP address, or the template is invalid.
    """
    try:
        ipaddress.ip_address(pod_ip)
    except ValueError as err:
        raise errors.ConfigError(f"pod IP {pod_ip!r} is not an IP address") from err
    fields = {
        "IMEXCmdBindInterfaceIP": pod_ip,
        "IMEXDaemonNodesConfigPath": str(settings.nodes_config_name or settings.nodes_config_path),
        "IMEXServerPort": str(settings.server_port),
        "IMEXCmdPort": str(settings.cmd_port),
    }
    return render_template(template, fields)


def render_nodes_config(entries: Sequence[str]) -> str:
    """Nodes-config text: one entry per line, each ending in a newline; pure."""
    for entry in entries:
        if not entry or any(c.isspace() for c in entry):
            raise errors.ConfigError(f"invalid IMEX nodes-config entry {entry!r}")
    return "".join(f"{entry}\n" for entry in entries)


def dns_nodes_config(max_nodes: int, domain: str = "") -> str:
    """The static DNS-names-mode nodes config of IMEX domain ``domain`` (a CD's UID, or
    ``shared-imex.<cliqueID>``): ``compute-domain-daemon-<infix>-0000`` … ``<max-1>``;
    NVIDIA's ``compute-domain-daemon-0000`` … without a domain."""
    if max_nodes < 1:
        raise errors.ConfigError(f"max nodes per IMEX domain must be >= 1, got {max_nodes}")
    return render_nodes_config(dnsnames.static_node_names(max_nodes, domain))


def load_template(settings: ImexFilesSettings) -> str:
    """The plugin-provided template if present, else :data:`DEFAULT_TEMPLATE`."""
    if settings.template_path is not None:
        text = atomicfile.read_text_or_none(settings.template_path)
        if text is not None:
            return text
    return DEFAULT_TEMPLATE


def write_imex_config(settings: ImexFilesSettings, *, pod_ip: str) -> str:
    """Render and atomically write the IMEX daemon config (and the workloads' copy, when
    ``client_config_path`` is set); returns the text of the daemon's own config."""
    template = load_template(settings)
    text = render_imex_config(template, pod_ip=pod_ip, settings=settings)
    atomicfile.write_atomic(settings.config_path, text, mode=settings.file_mode)
    if settings.client_config_path is not None:
        seen = dataclasses.replace(settings, nodes_config_name=settings.client_nodes_config_name)
        client = render_imex_config(template, pod_ip=pod_ip, settings=seen)
        atomicfile.write_atomic(settings.client_config_path, client, mode=settings.file_mode)
    return text


def write_nodes_config(settings: ImexFilesSettings, text: str) -> bool:
    """Atomically write the nodes config if its content differs; True if it was written."""
    if atomicfile.read_text_or_none(settings.nodes_config_path) == text:
        return False
    atomicfile.write_atomic(settings.nodes_config_path, text, mode=settings.file_mode)
    return True
