"""``cdctl daemon run``: the per-ComputeDomain daemon (flags and environment → settings).

The controller's DaemonSet runs ``cdctl daemon run`` and probes its ``/readyz`` (on
``--metrics-port``), which the daemon answers from its own IMEX check; ``cdctl daemon check``
runs that check once by hand, answered by ``cli/entry`` before click is imported (its flags are
the ``run`` ones it shares). Each start-up step is timed from the process start
(``daemon.steps``); the first one, ``settings_loaded``, is marked here once the flags are read
and validated. The environment is exactly what that DaemonSet sets (``NODE_NAME``, ``POD_IP``,
``POD_UID``, ``POD_NAME``, ``POD_NAMESPACE``, ``MAX_NODES_PER_IMEX_DOMAIN``, ``LOG_VERBOSITY``,
``METRICS_PORT``) plus what the
kubelet plugin injects through the daemon claim's CDI edits (``CLIQUE_ID``,
``COMPUTE_DOMAIN_UUID``, ``COMPUTE_DOMAIN_NAME``, ``COMPUTE_DOMAIN_NAMESPACE`` and the ``/imexd``
mount). Every variable is also a flag. The API is reached in-cluster with the pod's
ServiceAccount unless ``--kubeconfig`` is given. SIGTERM or SIGINT stops the daemon (IMEX
stopped, clique entry removed); after ``--shutdown-timeout`` seconds the process exits anyway.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

import click

from compute_domains.api import names
from compute_domains.cli import serving
from compute_domains.daemon import app, imexconfig, steps, supervisor
from compute_domains.daemon import metrics as daemon_metrics
from compute_domains.daemon.config import DaemonSettings, Identity, PeerSettings
from compute_domains.infra import errors, kube, logs

logger = logging.getLogger(__name__)

_PATH = click.Path(dir_okay=False, path_type=Path)


@click.group("daemon")
def group() -> None:
    """The per-ComputeDomain IMEX daemon (as the controller's DaemonSet runs it)."""


@group.command("run")
@click.option(
    "--cliqueid",
    "clique_id",
    envvar="CLIQUE_ID",
    default="",
    help="Clique ID <clusterUUID>.<clique> of the node; empty without MNNVL. Env CLIQUE_ID (CDI).",
)
@click.option(
    "--imex-config",
    type=_PATH,
    default=Path("/imexd/imexd.cfg"),
    show_default=True,
    help="IMEX daemon config written by `run`, read by IMEX and its ctl tool.",
)
@click.option(
    "--log-verbosity",
    "--log-level",
    "log_verbosity",
    envvar="LOG_VERBOSITY",
    callback=serving.check_level,
    default="info",
    show_default=True,
    help=f"Log level: {serving.LEVEL_HELP}. Env LOG_VERBOSITY.",
)
@click.option(
    "--log-format",
    envvar=["LOG_FORMAT", "CD_LOG_FORMAT"],
    type=click.Choice(["text", "json"], case_sensitive=False),
    default="text",
    show_default=True,
    help="Log line format. Env LOG_FORMAT or CD_LOG_FORMAT.",
)
@click.option("--node-name", envvar="NODE_NAME", default="", help="Env NODE_NAME.")
@click.option("--pod-ip", envvar="POD_IP", default="", help="Env POD_IP.")
@click.option("--pod-uid", envvar="POD_UID", default="", help="Env POD_UID.")
@click.option("--pod-name", envvar="POD_NAME", default="", help="Env POD_NAME.")
@click.option("--pod-namespace", envvar="POD_NAMESPACE", default="", help="Env POD_NAMESPACE.")
@click.option("--compute-domain-uuid", envvar="COMPUTE_DOMAIN_UUID", default="", help="Env (CDI).")
@click.option("--compute-domain-name", envvar="COMPUTE_DOMAIN_NAME", default="", help="Env (CDI).")
@click.option(
    "--compute-domain-namespace",
    envvar="COMPUTE_DOMAIN_NAMESPACE",
    default="default",
    show_default=True,
    help="Env COMPUTE_DOMAIN_NAMESPACE (CDI).",
)
@click.option(
    "--max-nodes-per-imex-domain",
    envvar="MAX_NODES_PER_IMEX_DOMAIN",
    type=click.IntRange(min=1),
    default=18,
    show_default=True,
    help="Slots per clique (IMEX names 0..N-1). Env MAX_NODES_PER_IMEX_DOMAIN.",
)
@click.option(
    "--imex-nodes-config",
    type=_PATH,
    default=Path("/imexd/nodes.cfg"),
    show_default=True,
    help="Static IMEX nodes config (DNS names).",
)
@click.option(
    "--imex-config-template",
    type=_PATH,
    default=Path("/imexd/imexd.cfg.tmpl"),
    show_default=True,
    help="Config template placed by the kubelet plugin; the built-in one when missing.",
)
@click.option(
    "--hosts-file",
    type=_PATH,
    default=Path("/etc/hosts"),
    show_default=True,
    help="Hosts file whose managed block maps peer names to pod IPs.",
)
@click.option(
    "--imex-binary", default="nvidia-imex", show_default=True, help="IMEX daemon (on PATH)."
)
@click.option(
    "--imex-ctl",
    default="nvidia-imex-ctl",
    show_default=True,
    help="IMEX ctl tool (on PATH) of the daemon's own readiness check.",
)
@click.option(
    "--imex-stop-grace",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds between SIGTERM and SIGKILL when stopping IMEX.",
)
@click.option(
    "--metrics-port",
    envvar="METRICS_PORT",
    type=click.IntRange(min=0, max=65535),
    default=0,
    show_default=True,
    help=f"Port of /metrics and {names.DAEMON_HEALTH_PATH} (the probes) on the pod IP; 0 serves "
    "none. Env METRICS_PORT.",
)
@click.option(
    "--unfilled-slot-address",
    default="",
    help="Map names of unfilled slots to this address (never a pod's); unset: unresolvable.",
)
@serving.kubeconfig_option
@serving.shutdown_timeout_option(25.0)
def run(**opts: Any) -> None:
    """Run the daemon until SIGTERM."""
    _setup_logs(opts)
    metrics = daemon_metrics.DaemonMetrics()
    timeline = steps.Steps(
        started_at=steps.process_start(),
        on_step=metrics.step,
        fields={"node": opts["node_name"]},
    )
    settings = DaemonSettings(
        identity=Identity(
            node_name=opts["node_name"],
            pod_name=opts["pod_name"],
            pod_namespace=opts["pod_namespace"],
            pod_uid=opts["pod_uid"],
            pod_ip=opts["pod_ip"],
            clique_id=opts["clique_id"],
            domain_uid=opts["compute_domain_uuid"],
            domain_name=opts["compute_domain_name"],
            domain_namespace=opts["compute_domain_namespace"],
        ),
        max_nodes=opts["max_nodes_per_imex_domain"],
        imex=imexconfig.ImexFilesSettings(
            config_path=opts["imex_config"],
            nodes_config_path=opts["imex_nodes_config"],
            template_path=opts["imex_config_template"],
        ),
        imex_command=(opts["imex_binary"],),
        imex_ctl_command=opts["imex_ctl"],
        supervisor=supervisor.SupervisorSettings(
            name="imex", stop_grace=opts["imex_stop_grace"], parent_death_signal=signal.SIGKILL
        ),
        peers=PeerSettings(
            hosts_file=opts["hosts_file"], unfilled_address=opts["unfilled_slot_address"] or None
        ),
        kube=kube.KubeSettings(
            kubeconfig=opts["kubeconfig"], field_manager="compute-domain-daemon"
        ),
        metrics_port=opts["metrics_port"],
    )
    settings.validate()
    timeline.mark(steps.SETTINGS_LOADED)
    asyncio.run(_serve(settings, metrics, timeline, opts["shutdown_timeout"]))


def _setup_logs(opts: dict[str, Any]) -> None:
    fmt: logs.LogFormat = "json" if opts["log_format"].lower() == "json" else "text"
    logs.setup(opts["log_verbosity"], fmt)
    # Every HTTP exchange is a DEBUG line in the transport; far too chatty for a daemon log.
    for name in ("httpcore2", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


async def _serve(
    settings: DaemonSettings,
    metrics: daemon_metrics.DaemonMetrics,
    timeline: steps.Steps,
    shutdown_timeout: float,
) -> None:
    """Run the daemon; the first SIGTERM/SIGINT cancels it; exit is forced after a bound."""
    client = kube.client(settings.kube)
    daemon = app.Daemon(settings, client, metrics=metrics, timeline=timeline)
    try:
        await serving.serve(daemon.run(), "daemon", shutdown_timeout)
        logger.info("stopped")
    except ExceptionGroup as group_:
        # Each task's failure was logged with its traceback; print one clear line per cause.
        leaves = _leaves(group_)
        summary = "; ".join(f"{type(e).__name__}: {e}" for e in leaves)
        raise errors.ComputeDomainsError(f"daemon failed: {summary}") from leaves[0]
    finally:
        await client.close()


def _leaves(group_: BaseExceptionGroup[Any]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group_.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out
