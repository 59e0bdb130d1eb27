"""``cdctl agent run``: the resident IMEX agent (flags and environment → settings).

The chart's agent DaemonSet (rendered when ``imex.agents=resident``) runs ``cdctl agent run`` on
every GPU node. Its flags are those of ``cdctl daemon run`` (``cli.daemonopts``: the pod
identity, the IMEX programs, the hosts file, logging, timings), less what a daemon claim's CDI
edits would give (the CD's identity and the ``/imexd`` paths: the agent learns the CD from its
Node and writes each CD's files in that CD's per-CD folder under ``--domains-dir``), plus
``--domains-dir`` itself and ``--shared-imex-eager`` (the plugins' ``SHARED_IMEX_EAGER``: the
agent's ``/readyz`` then waits for an idle clique node's shared-IMEX label).
``--metrics-port`` is the agent's own ``/metrics`` and ``/readyz`` (its probes). For each CD
it serves, :func:`factory` builds the daemon settings with the same builder as ``daemon run``
(``cli.daemon.daemon_settings`` of ``cli.daemon.domain_options``); for the clique's shared
IMEX (node label ``compute-domains/shared-imex=on``) it builds them for the pseudo-domain
``shared-imex`` (``agent.config.shared_domain``: files in ``<domains-dir>/shared-imex``).
SIGTERM or SIGINT stops the agent (the served CD's IMEX stopped, its clique entry removed, our
pod unlabelled); after ``--shutdown-timeout`` seconds the process exits anyway.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from compute_domains.agent import app
from compute_domains.agent.config import AgentSettings, DaemonFactory, Domain
from compute_domains.cli import daemon as daemon_cli
from compute_domains.cli import daemonopts, serving
from compute_domains.daemon import launcher
from compute_domains.daemon.config import DaemonSettings
from compute_domains.infra import kube, tasks
from compute_domains.infra.kube import informers as kube_informers

logger = logging.getLogger(__name__)

AGENT_OPTIONS: tuple[daemonopts.Option, ...] = (
    *daemonopts.RUN_OPTIONS,
    daemonopts.Option(
        ("--domains-dir",),
        "domains_dir",
        "The kubelet plugin's per-CD folders (<plugin dir>/domains) as mounted in the agent. "
        "Env DOMAINS_DIR.",
        default="/domains",
        env=("DOMAINS_DIR",),
        show_default=True,
    ),
    daemonopts.Option(
        ("--shared-imex-eager",),
        "shared_imex_eager",
        "true: the kubelet plugins label every node with a clique ID for its clique's shared "
        "IMEX at their start (the chart's imex.scope=perClique), so an idle agent on such a "
        "node is not Ready until that label came and the shared IMEX passes its check. Env "
        "SHARED_IMEX_EAGER.",
        default="false",
        env=("SHARED_IMEX_EAGER",),
        kind="choice",
        choices=("true", "false"),
        show_default=True,
    ),
)
"""Every flag of ``cdctl agent run``: ``daemon run``'s, ``--domains-dir`` and
``--shared-imex-eager``."""


def __getattr__(name: str) -> Any:
    """``group``, the click command group, built on first use."""
    if name != "group":
        raise AttributeError(name)
    built = _click_group()
    globals()["group"] = built
    return built


def _click_group() -> Any:
    import click

    @click.group("agent")
    def agent_group() -> None:
        """The resident IMEX agent (one per GPU node, chart value imex.agents=resident)."""

    def run_command(**opts: Any) -> None:
        """Run the agent until SIGTERM."""
        run(opts)

    for opt in reversed(AGENT_OPTIONS):
        run_command = daemon_cli.click_option(opt)(run_command)
    agent_group.command("run")(run_command)
    return agent_group


def agent_settings(opts: Mapping[str, Any], *, domains_dir: Path | None = None) -> AgentSettings:
    """The agent's settings from ``agent run``'s options (``domains_dir`` overrides the flag).

    Raises:
        ConfigError: the pod identity is incomplete or a value is out of range.
    """
    return AgentSettings(
        node_name=opts["node_name"] or "",
        pod_name=opts["pod_name"] or "",
        pod_namespace=opts["pod_namespace"] or "",
        pod_ip=opts["pod_ip"] or "",
        domains_dir=domains_dir or Path(opts["domains_dir"]),
        metrics_port=opts["metrics_port"],
        shared_imex_eager=str(opts.get("shared_imex_eager") or "false").lower() == "true",
        kube=serving.component_kube(opts, "compute-domain-agent"),
    )


def factory(
    opts: Mapping[str, Any], *, seen_as: Callable[[Domain], Path] | None = None
) -> DaemonFactory:
    """The daemon settings of one CD for an agent with ``opts`` (``cli.daemon``'s builder).

    ``seen_as``: where IMEX sees a CD's folder when the agent writes it elsewhere (sim).
    """

    def build(domain: Domain) -> DaemonSettings:
        where = seen_as(domain) if seen_as is not None else None
        return daemon_cli.daemon_settings(daemon_cli.domain_options(opts, domain, seen_as=where))

    return build


def run(opts: dict[str, Any]) -> None:
    """Run the agent with the options of ``agent run``."""
    daemon_cli.setup_logs(opts)
    settings = agent_settings(opts)
    build = factory(opts)
    asyncio.run(serving.serve(run_agent(settings, build), "agent", float(opts["shutdown_timeout"])))
    logger.info("stopped")


async def run_agent(
    settings: AgentSettings,
    build: DaemonFactory,
    programs: launcher.Launcher | None = None,
    informers: kube_informers.Informers | None = None,
) -> None:
    """Run the agent with its own API client until cancelled (``informers``: the host's shared
    caches of an in-process agent; None: its own watches).

    Raises:
        ComputeDomainsError: a task failed (one line naming every cause).
    """
    client = kube.client(settings.kube)
    agent = app.ResidentAgent(
        settings, client, daemon_settings=build, programs=programs, informers=informers
    )
    try:
        await agent.run()
    except ExceptionGroup as group_:
        error = tasks.one_error("agent", group_)
        raise error from error.__cause__
    finally:
        await client.close()
