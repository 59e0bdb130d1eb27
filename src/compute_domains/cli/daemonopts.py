"""The flags of ``cdctl daemon run``, defined once, and a click-free parser of them.

``cdctl daemon run`` starts on every node of a forming domain, so its start-up is on the
formation's critical path; click and the command tree cost about 10 ms of CPU per start on top
of what the daemon itself needs. :data:`RUN_OPTIONS` is the only definition of the command's
flags: ``cli.daemon`` builds the click command (``--help``, users, errors) from it, and
:func:`parse` reads the same flags and environment variables without click, for
``cli.entry``. :func:`parse` answers only what it is sure click would accept with the same
values (click's rules: a flag beats its environment variables, the first non-empty variable
beats the default, a flag given twice keeps its last value, a default is converted as a value
is); anything else (``--help``, an unknown flag, a bad value, a missing value) returns None and
the caller hands the command line to click, which prints its usual message.

Standard library only (and ``infra.logs`` for the level names); no click.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from compute_domains.api import names
from compute_domains.infra import logs

Kind = Literal["str", "path", "int", "float", "choice", "level"]


@dataclasses.dataclass(frozen=True, slots=True)
class Option:
    """One flag of ``daemon run``: click's ``@option`` arguments, in plain data."""

    flags: tuple[str, ...]
    """Long flags, the first one the canonical name."""
    dest: str
    """Key in the options dict (the click parameter name)."""
    help: str
    default: str | int | float | Path | None = ""
    env: tuple[str, ...] = ()
    """Environment variables read in this order when no flag is given (empty ones skipped)."""
    kind: Kind = "str"
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    """For ``choice``: the allowed values, compared case-insensitively."""
    show_default: bool = False


def _env_help(name: str) -> str:
    return f"Env {name}."


RUN_OPTIONS: tuple[Option, ...] = (
    Option(
        ("--cliqueid",),
        "clique_id",
        "Clique ID <clusterUUID>.<clique> of the node; empty without MNNVL. Env CLIQUE_ID (CDI).",
        env=("CLIQUE_ID",),
    ),
    Option(
        ("--imex-config",),
        "imex_config",
        "IMEX daemon config written by `run`, read by IMEX and its ctl tool.",
        default=Path("/imexd/imexd.cfg"),
        kind="path",
        show_default=True,
    ),
    Option(
        ("--log-verbosity", "--log-level"),
        "log_verbosity",
        f"Log level: {logs.LEVEL_HELP}. Env LOG_VERBOSITY.",
        default="info",
        env=("LOG_VERBOSITY",),
        kind="level",
        show_default=True,
    ),
    Option(
        ("--log-format",),
        "log_format",
        "Log line format. Env LOG_FORMAT or CD_LOG_FORMAT.",
        default="text",
        env=("LOG_FORMAT", "CD_LOG_FORMAT"),
        kind="choice",
        choices=("text", "json"),
        show_default=True,
    ),
    Option(("--node-name",), "node_name", _env_help("NODE_NAME"), env=("NODE_NAME",)),
    Option(("--pod-ip",), "pod_ip", _env_help("POD_IP"), env=("POD_IP",)),
    Option(("--pod-uid",), "pod_uid", _env_help("POD_UID"), env=("POD_UID",)),
    Option(("--pod-name",), "pod_name", _env_help("POD_NAME"), env=("POD_NAME",)),
    Option(
        ("--pod-namespace",), "pod_namespace", _env_help("POD_NAMESPACE"), env=("POD_NAMESPACE",)
    ),
    Option(
        ("--compute-domain-uuid",),
        "compute_domain_uuid",
        "Env (CDI).",
        env=("COMPUTE_DOMAIN_UUID",),
    ),
    Option(
        ("--compute-domain-name",),
        "compute_domain_name",
        "Env (CDI).",
        env=("COMPUTE_DOMAIN_NAME",),
    ),
    Option(
        ("--compute-domain-namespace",),
        "compute_domain_namespace",
        "Env COMPUTE_DOMAIN_NAMESPACE (CDI).",
        default="default",
        env=("COMPUTE_DOMAIN_NAMESPACE",),
        show_default=True,
    ),
    Option(
        ("--max-nodes-per-imex-domain",),
        "max_nodes_per_imex_domain",
        "Slots per clique (IMEX names 0..N-1). Env MAX_NODES_PER_IMEX_DOMAIN.",
        default=18,
        env=("MAX_NODES_PER_IMEX_DOMAIN",),
        kind="int",
        minimum=1,
        show_default=True,
    ),
    Option(
        ("--imex-nodes-config",),
        "imex_nodes_config",
        "Static IMEX nodes config (DNS names).",
        default=Path("/imexd/nodes.cfg"),
        kind="path",
        show_default=True,
    ),
    Option(
        ("--imex-config-template",),
        "imex_config_template",
        "Config template placed by the kubelet plugin; the built-in one when missing.",
        default=Path("/imexd/imexd.cfg.tmpl"),
        kind="path",
        show_default=True,
    ),
    Option(
        ("--imex-peer-names",),
        "imex_peer_names",
        "IMEX peer names: `domain` (compute-domain-daemon-<infix>-NNNN, unique per domain) or "
        "`nvidia` (NVIDIA's compute-domain-daemon-NNNN, to join the IMEX domain of NVIDIA's "
        "daemons in a domain NVIDIA formed). Env IMEX_PEER_NAMES.",
        default="domain",
        env=("IMEX_PEER_NAMES",),
        kind="choice",
        choices=("domain", "nvidia"),
        show_default=True,
    ),
    Option(
        ("--hosts-file",),
        "hosts_file",
        "Hosts file whose managed block maps peer names to pod IPs.",
        default=Path("/etc/hosts"),
        kind="path",
        show_default=True,
    ),
    Option(
        ("--imex-binary",),
        "imex_binary",
        "IMEX daemon (on PATH).",
        default="nvidia-imex",
        show_default=True,
    ),
    Option(
        ("--imex-ctl",),
        "imex_ctl",
        "IMEX ctl tool (on PATH) of the daemon's own readiness check.",
        default="nvidia-imex-ctl",
        show_default=True,
    ),
    Option(
        ("--imex-stop-grace",),
        "imex_stop_grace",
        "Seconds between SIGTERM and SIGKILL when stopping IMEX.",
        default=10.0,
        kind="float",
        minimum=0.1,
        show_default=True,
    ),
    Option(
        ("--metrics-port",),
        "metrics_port",
        f"Port of /metrics and {names.DAEMON_HEALTH_PATH} (the probes) on the pod IP; 0 serves "
        "none. Env METRICS_PORT.",
        default=0,
        env=("METRICS_PORT",),
        kind="int",
        minimum=0,
        maximum=65535,
        show_default=True,
    ),
    Option(
        ("--unfilled-slot-address",),
        "unfilled_slot_address",
        "Map names of unfilled slots to this address (never a pod's; upstream's sentinel); "
        "empty: unresolvable.",
        default=names.IMEX_UNFILLED_SLOT_ADDRESS,
        show_default=True,
    ),
    Option(
        ("--kubeconfig",),
        "kubeconfig",
        "Kubeconfig file; in-cluster ServiceAccount when unset. Env KUBECONFIG.",
        default=None,
        env=("KUBECONFIG",),
        kind="path",
    ),
    Option(
        ("--shutdown-timeout",),
        "shutdown_timeout",
        "Seconds a stop may take before the process exits anyway.",
        default=25.0,
        env=("SHUTDOWN_TIMEOUT",),
        kind="float",
        minimum=1.0,
        show_default=True,
    ),
)
"""Every flag of ``cdctl daemon run``, in ``--help`` order."""

ROOT_LEVEL_ENV = "CD_LOG_LEVEL"
"""The root command's own level variable: click checks it before any sub-command runs."""


class _Refused(Exception):
    """Click would not accept this (or might word it differently): let click answer."""


def convert(opt: Option, value: str | int | float | Path | None) -> object:
    """``value`` (a string from argv or the environment, or the default) as click converts it.

    Raises:
        ValueError: click would reject it.
    """
    if value is None:
        return None
    if opt.kind == "str":
        return str(value)
    if opt.kind == "level":
        return logs.normal_level(str(value))
    if opt.kind == "choice":
        text = str(value)
        for choice in opt.choices:
            if text.lower() == choice.lower():
                return choice
        raise ValueError(f"{text!r} is not one of {opt.choices}")
    if opt.kind == "path":
        path = Path(str(value))
        if not str(value):
            raise ValueError("empty path")
        try:
            mode = path.stat().st_mode
        except OSError:
            return path  # need not exist
        if stat.S_ISDIR(mode) or not os.access(path, os.R_OK):
            raise ValueError(f"{value!r} is a directory or not readable")
        return path
    number: int | float = int(str(value)) if opt.kind == "int" else float(str(value))
    if (opt.minimum is not None and number < opt.minimum) or (
        opt.maximum is not None and number > opt.maximum
    ):
        raise ValueError(f"{number} is out of range")
    return number


def _flag_table() -> dict[str, Option]:
    return {flag: opt for opt in RUN_OPTIONS for flag in opt.flags}


def _given(argv: Sequence[str]) -> dict[str, str]:
    by_flag = _flag_table()
    given: dict[str, str] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        flag, eq, inline = arg.partition("=")
        opt = by_flag.get(flag) if arg.startswith("--") else None
        if opt is None:
            raise _Refused(arg)  # --help, an unknown flag or an argument: click's to answer
        if eq:
            given[opt.dest] = inline
            i += 1
            continue
        if i + 1 >= len(args) or args[i + 1].startswith("-"):
            raise _Refused(arg)  # no value, or one click might read as a flag
        given[opt.dest] = args[i + 1]
        i += 2
    return given


def parse(
    argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> dict[str, object] | None:
    """The options dict click would pass to ``daemon run`` for ``argv`` and the environment.

    None when click should answer instead (see the module docstring).
    """
    env = os.environ if environ is None else environ
    try:
        if env.get(ROOT_LEVEL_ENV):
            logs.normal_level(env[ROOT_LEVEL_ENV])
        given = _given(argv)
        opts: dict[str, object] = {}
        for opt in RUN_OPTIONS:
            raw: str | int | float | Path | None = given.get(opt.dest)
            if raw is None:
                raw = next((env[name] for name in opt.env if env.get(name)), opt.default)
            opts[opt.dest] = convert(opt, raw)
    except (_Refused, ValueError, OSError):
        return None
    return opts
