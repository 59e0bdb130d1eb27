"""``cdctl daemon run``: the per-ComputeDomain daemon (flags and environment → settings).

The controller's DaemonSet runs ``cdctl daemon run`` and probes its ``/readyz`` (on
``--metrics-port``), which the daemon answers from its own IMEX check; ``cdctl daemon check``
runs that check once by hand, answered by ``cli/entry`` before click is imported (its flags are
the ``run`` ones it shares). ``daemon run`` itself also starts without click: ``cli/entry``
parses its flags with ``cli.daemonopts`` (the one table of them, from which :data:`group`, the
click command for ``--help`` and usage errors, is built on first use) and calls :func:`run`.
Each start-up step is timed from the process start (``daemon.steps``); the first one,
``settings_loaded``, is marked here once the flags are read and validated. The environment is
exactly what that DaemonSet sets (``NODE_NAME``, ``POD_IP``, ``POD_UID``, ``POD_NAME``,
``POD_NAMESPACE``, ``MAX_NODES_PER_IMEX_DOMAIN``, ``LOG_VERBOSITY``, ``METRICS_PORT``) plus what the
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
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compute_domains.cli import daemonopts, serving
from compute_domains.daemon import app, imexconfig, launcher, steps, supervisor
from compute_domains.daemon import metrics as daemon_metrics
from compute_domains.daemon.config import DaemonSettings, Identity, PeerSettings
from compute_domains.infra import kube, logs, tasks
from compute_domains.infra.kube import informers as kube_informers

AGENT_IMEX_CONFIG = "imexd.agent.cfg"
"""Name of a resident agent's own IMEX config in a CD's per-CD folder."""

if TYPE_CHECKING:  # the daemon's start-up does not import the agent
    from compute_domains.agent.config import Domain

logger = logging.getLogger(__name__)


def __getattr__(name: str) -> Any:
    """``group``, the click command group, built on first use (click is imported only then)."""
    if name != "group":
        raise AttributeError(name)
    built = _click_group()
    globals()["group"] = built
    return built


def click_option(opt: daemonopts.Option) -> Any:
    """The click ``@option`` decorator for one flag of ``daemonopts`` (imports click)."""
    import click

    kind: Any
    if opt.kind == "path":
        kind = click.Path(dir_okay=False, path_type=Path)
    elif opt.kind == "choice":
        kind = click.Choice(list(opt.choices), case_sensitive=False)
    elif opt.kind == "int":
        kind = click.IntRange(min=_int(opt.minimum), max=_int(opt.maximum))
    elif opt.kind == "float":
        kind = click.FloatRange(min=opt.minimum, max=opt.maximum)
    else:
        kind = None
    return click.option(
        *opt.flags,
        opt.dest,
        envvar=list(opt.env) or None,
        type=kind,
        default=opt.default,
        show_default=opt.show_default,
        callback=serving.check_level if opt.kind == "level" else None,
        help=opt.help,
    )


def _click_group() -> Any:
    import click

    @click.group("daemon")
    def daemon_group() -> None:
        """The per-ComputeDomain IMEX daemon (as the controller's DaemonSet runs it)."""

    def run_command(**opts: Any) -> None:
        """Run the daemon until SIGTERM."""
        run(opts)

    for opt in reversed(daemonopts.RUN_OPTIONS):
        run_command = click_option(opt)(run_command)
    daemon_group.command("run")(run_command)
    return daemon_group


def _int(bound: float | None) -> int | None:
    return None if bound is None else int(bound)


def run(opts: dict[str, Any]) -> None:
    """Run the daemon with the options of ``daemon run`` (click's or ``daemonopts.parse``'s)."""
    setup_logs(opts)
    metrics = daemon_metrics.DaemonMetrics()
    timeline = steps.Steps(
        started_at=steps.process_start(),
        on_step=metrics.step,
        fields={"node": opts["node_name"]},
    )
    settings = daemon_settings(opts)
    timeline.mark(steps.SETTINGS_LOADED)
    asyncio.run(_serve(settings, metrics, timeline, opts["shutdown_timeout"]))


def daemon_settings(opts: Mapping[str, Any]) -> DaemonSettings:
    """The daemon's validated settings from the values of ``run``'s parameters (also used by
    ``cli.inprocess`` for a virtual node's daemon).

    Raises:
        ConfigError: the values do not make a valid daemon.
    """
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
        nvidia_peer_names=str(opts.get("imex_peer_names") or "domain").lower() == "nvidia",
        imex=imexconfig.ImexFilesSettings(
            config_path=opts["imex_config"],
            nodes_config_path=opts["imex_nodes_config"],
            nodes_config_name=opts.get("imex_nodes_config_name"),
            client_config_path=opts.get("imex_client_config"),
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
        kube=serving.component_kube(opts, "compute-domain-daemon"),
        metrics_port=opts["metrics_port"],
    )
    settings.validate()
    return settings


def domain_options(
    opts: Mapping[str, Any], domain: Domain, *, seen_as: Path | None = None
) -> dict[str, Any]:
    """The options of ``daemon run`` for CD ``domain`` served by a resident agent with ``opts``.

    The daemon's pod identity, programs and timings are the agent's; the CD's identity is
    ``domain``'s (the CDI env of a daemon claim); its IMEX files live in the CD's per-CD folder
    ``domain.domain_dir`` (the one a daemon claim mounts at ``/imexd``), where the CD's
    workloads see them: IMEX's own config as :data:`AGENT_IMEX_CONFIG`, and ``imexd.cfg`` for
    the workloads (the same text, naming the node list as ``/imexd/nodes.cfg``); a clique ID
    given to the agent (``--cliqueid``) beats the Node's label.
    ``seen_as``: that folder as IMEX sees it, when the agent writes it through another path
    (a virtual node's agent writes through the node's folder); no own probe port (the agent
    serves the probes).
    """
    folder = domain.domain_dir
    out = dict(opts)
    out.update(
        clique_id=opts.get("clique_id") or domain.assignment.clique_id,
        compute_domain_uuid=domain.assignment.domain_uid,
        compute_domain_name=domain.name,
        compute_domain_namespace=domain.namespace,
        # IMEX's own config names the node list where the agent sees it; the workloads read
        # /imexd/imexd.cfg, which names it where they see it (/imexd/nodes.cfg).
        imex_config=folder / AGENT_IMEX_CONFIG,
        imex_client_config=folder / "imexd.cfg",
        imex_nodes_config=folder / "nodes.cfg",
        imex_nodes_config_name=None if seen_as is None else seen_as / "nodes.cfg",
        imex_config_template=folder / "imexd.cfg.tmpl",
        metrics_port=0,
    )
    return out


def setup_logs(opts: Mapping[str, Any]) -> None:
    """Logging of a daemon (or agent) process from its ``--log-*`` options."""
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
    await serving.serve(run_daemon(settings, metrics, timeline), "daemon", shutdown_timeout)
    logger.info("stopped")


async def run_daemon(
    settings: DaemonSettings,
    metrics: daemon_metrics.DaemonMetrics,
    timeline: steps.Steps,
    programs: launcher.Launcher | None = None,
    informers: kube_informers.Informers | None = None,
) -> None:
    """Run the daemon with its own API client until cancelled; ``programs`` is how it runs
    ``nvidia-imex`` (child processes when None); ``informers`` the host's shared caches (an
    in-process daemon of a virtual node; None: its own watches).

    Raises:
        ComputeDomainsError: a task failed (one line naming every cause).
    """
    client = kube.client(settings.kube)
    daemon = app.Daemon(
        settings,
        client,
        metrics=metrics,
        timeline=timeline,
        programs=programs,
        informers=informers,
    )
    try:
        await daemon.run()
    except ExceptionGroup as group_:
        error = tasks.one_error("daemon", group_)
        raise error from error.__cause__
    finally:
        await client.close()
