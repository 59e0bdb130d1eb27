"""``cdctl controller ...``: run the controller (flags and environment → settings → ``run()``).

``cdctl controller run`` is what the Helm chart's Deployment runs. Every flag has an environment
variable (upstream's names where upstream has the setting), so the chart configures it through
``env``. SIGTERM or SIGINT cancels the controller; it steps down (releasing its Lease) within
``--shutdown-timeout`` seconds, after which the process exits regardless.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import click

from compute_domains import controller
from compute_domains.api import sharedimex
from compute_domains.cli import serving
from compute_domains.infra import kube


@click.group("controller")
def group() -> None:
    """The controller component (as the Helm chart runs it)."""


@group.command("run")
@click.option(
    "--namespace",
    envvar=["POD_NAMESPACE", "NAMESPACE"],
    default="default",
    show_default=True,
    help="Driver namespace (DaemonSets, daemon claim templates, cliques). Env POD_NAMESPACE.",
)
@click.option(
    "--image",
    "--image-name",
    "image",
    envvar="IMAGE_NAME",
    required=True,
    help="Image of the per-ComputeDomain daemon pods. Env IMAGE_NAME.",
)
@click.option(
    "--max-nodes-per-imex-domain",
    envvar="MAX_NODES_PER_IMEX_DOMAIN",
    type=click.IntRange(min=1),
    default=18,
    show_default=True,
    help="Daemon slots per clique. Env MAX_NODES_PER_IMEX_DOMAIN.",
)
@click.option(
    "--daemon-image-pull-secrets",
    envvar="CD_DAEMON_IMAGE_PULL_SECRET_NAMES",
    default="",
    help="Comma-separated Secret names for pulling the daemon image.",
)
@click.option(
    "--daemon-log-level",
    envvar="LOG_VERBOSITY_CD_DAEMON",
    callback=serving.check_level,
    default=None,
    help="Log level of the daemons (same forms as --log-level); defaults to --log-level. "
    "Env LOG_VERBOSITY_CD_DAEMON.",
)
@click.option(
    "--daemon-priority-class",
    envvar="DAEMON_PRIORITY_CLASS_NAME",
    default="",
    help="PriorityClass of the daemon pods (empty: none). Env DAEMON_PRIORITY_CLASS_NAME.",
)
@click.option(
    "--daemon-cpu",
    envvar="DAEMON_CPU",
    default="",
    help="CPU request and limit of the daemon container (empty: none). Env DAEMON_CPU.",
)
@click.option(
    "--daemon-memory",
    envvar="DAEMON_MEMORY",
    default="",
    help="Memory request and limit of the daemon container (empty: none). Env DAEMON_MEMORY.",
)
@click.option(
    "--imex-agents",
    envvar="IMEX_AGENTS",
    type=click.Choice(["perComputeDomain", "resident"]),
    default="perComputeDomain",
    show_default=True,
    help="Who runs a CD's IMEX daemons: a DaemonSet per CD, or the chart's resident agents "
    "(docs/isolation.md). Env IMEX_AGENTS.",
)
@click.option(
    "--imex-scope",
    envvar="IMEX_SCOPE",
    type=click.Choice([s.value for s in sharedimex.Scope]),
    default=sharedimex.Scope.PER_DOMAIN.value,
    show_default=True,
    help="Isolation scope written onto a new ComputeDomain without the "
    "compute-domains/imex-scope annotation (perClique needs --imex-agents resident; "
    "docs/isolation.md). Env IMEX_SCOPE.",
)
@click.option(
    "--leader-election/--no-leader-election",
    envvar="LEADER_ELECTION_ENABLED",
    default=False,
    show_default=True,
    help="Lease-based leader election (needed with more than one replica).",
)
@click.option(
    "--leader-election-lease-name",
    envvar="LEADER_ELECTION_LEASE_LOCK_NAME",
    default="compute-domains-controller",
    show_default=True,
    help="Name of the Lease (in the driver namespace).",
)
@click.option(
    "--pod-name",
    envvar="POD_NAME",
    default=socket.gethostname,
    help="This replica's name, the base of its leader-election identity. Env POD_NAME.",
)
@click.option(
    "--metrics-port",
    envvar="METRICS_PORT",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Port of /metrics, /healthz, /readyz; 0 disables. Env METRICS_PORT.",
)
@click.option(
    "--metrics-address",
    envvar="METRICS_ADDRESS",
    default="",
    help="Address the metrics server binds (default: all). Env METRICS_ADDRESS.",
)
@click.option(
    "--workers",
    envvar="WORKERS",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="ComputeDomains reconciled at once.",
)
@serving.kubeconfig_option
@serving.log_options
@serving.shutdown_timeout_option(15.0)
def run(
    namespace: str,
    kubeconfig: Path | None,
    image: str,
    max_nodes_per_imex_domain: int,
    daemon_image_pull_secrets: str,
    daemon_log_level: str | None,
    daemon_priority_class: str,
    daemon_cpu: str,
    daemon_memory: str,
    imex_agents: str,
    imex_scope: str,
    leader_election: bool,
    leader_election_lease_name: str,
    pod_name: str,
    metrics_port: int,
    metrics_address: str,
    workers: int,
    log_level: str,
    log_format: str,
    shutdown_timeout: float,
) -> None:
    """Run the ComputeDomain controller until SIGTERM."""
    fmt = serving.setup_logs(log_level, log_format)
    settings = controller.ControllerSettings(
        namespace=namespace,
        kube=kube.KubeSettings(kubeconfig=kubeconfig, field_manager="compute-domain-controller"),
        daemon=controller.DaemonSettings(
            image=image,
            max_nodes_per_imex_domain=max_nodes_per_imex_domain,
            log_level=daemon_log_level or log_level,
            log_format=fmt,
            image_pull_secrets=tuple(daemon_image_pull_secrets.replace(",", " ").split()),
            priority_class_name=daemon_priority_class,
            cpu=daemon_cpu,
            memory=daemon_memory,
        ),
        leader_election=controller.LeaderElectionSettings(
            enabled=leader_election, lease_name=leader_election_lease_name, identity=pod_name
        ),
        metrics_port=metrics_port,
        metrics_address=metrics_address,
        workers=workers,
        imex_agents=imex_agents,
        default_imex_scope=sharedimex.Scope(imex_scope),
    )
    instance = controller.Controller(settings)
    asyncio.run(serving.serve(instance.run(), "controller", shutdown_timeout))
