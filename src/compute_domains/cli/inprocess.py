"""The project's component commands run in-process, for the simulator's virtual nodes.

A virtual node's containers run as tasks of the simulator's process
(``containers.virtual.VirtualRuntime``); this module is its table of programs: a container of
the project's image whose command is this installation's ``cdctl plugin run``,
``cdctl daemon run`` or ``cdctl agent run`` runs here, everything else as a process. Each runs
the same command as in a process:

1. :func:`resolve`: the command's click parameters from the container's argv, then its
   environment (each parameter's ``envvar`` looked up in the container's env, never this
   process's), then the defaults; converted and checked by click as on a command line;
2. the paths among them are translated to where the container's mounts put them on the node
   (``View.host_path``), and the in-cluster API credentials are the container's ServiceAccount
   mount and its ``KUBERNETES_SERVICE_HOST``/``_PORT``;
3. the same settings builders (``plugin.plugin_settings``, ``daemon.daemon_settings``) and
   the same component classes run, awaited in the container's task. What only a process has
   is replaced by an object with the same role: the plugin's NVML is the node's own library file
   (``plugin.nvmllib``, found on the container's ``LD_LIBRARY_PATH`` as the loader would), and
   the daemon's ``nvidia-imex`` is the IMEX stand-in in-process (``sim.imex_inproc``); what
   a process watches on its own, an in-process component follows in its host's shared caches
   (``View.informers``: one watch per kind for the whole host, issue 28). Logging
   is not set up (the process's is); the container's log sink takes the command's level and
   format.

A stop is the task's cancellation, the component's graceful stop as after SIGTERM.

The simulator's own workload stand-in (``mnnvl-workload``, when the container's PATH finds the
wrapper this installation wrote) runs in-process too (``sim.workload_inproc``): at hundreds of
pods a process each, not the driver, is what a virtual-node sim could not hold.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from compute_domains.cli import agent as agent_cli
from compute_domains.cli import daemon as daemon_cli
from compute_domains.cli import plugin as plugin_cli
from compute_domains.containers import virtual
from compute_domains.daemon import metrics as daemon_metrics
from compute_domains.daemon import steps
from compute_domains.plugin import app as plugin_app
from compute_domains.plugin import discovery, nvmllib
from compute_domains.sim import imex_inproc, standins, workload_inproc

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where a pod's ServiceAccount token, CA and namespace are mounted."""

_WORKLOAD = "mnnvl-workload"


def resolve(command: click.Command, args: Sequence[str], env: Mapping[str, str]) -> dict[str, Any]:
    """The values of ``command``'s parameters for ``args`` and the environment ``env``.

    Precedence as click's: a flag given, else its first environment variable set in ``env``,
    else the default. Values are converted and validated by the parameters themselves.

    Raises:
        click.UsageError: an unknown flag, an extra argument, a missing or invalid value.
    """
    ctx = click.Context(command, info_name=command.name)
    parser = command.make_parser(ctx)
    given, extra, _ = parser.parse_args(list(args))
    if extra:
        raise click.UsageError(f"unexpected arguments: {' '.join(extra)}", ctx)
    values: dict[str, Any] = {}
    for param in command.get_params(ctx):
        if param.name is None or param.name == "help":
            continue
        if param.name in given:
            raw = given[param.name]
        else:
            raw = next((env[n] for n in _envvars(param) if n in env), None)
            if raw is None:
                raw = param.get_default(ctx)
        values[param.name] = param.process_value(ctx, raw)
        ctx.params[param.name] = values[param.name]
    return values


def _envvars(param: click.Parameter) -> list[str]:
    names = param.envvar
    if names is None:
        return []
    return [names] if isinstance(names, str) else list(names)


def node_root(view: virtual.View, host_paths: Iterable[Path]) -> Path:
    """The node folder under which every one of ``host_paths`` is mounted at its own path.

    Raises:
        click.UsageError: they are not (the container's mounts do not mirror the host).
    """
    roots = set()
    for path in host_paths:
        local = str(view.host_path(path))
        if not local.endswith(str(path)):
            raise click.UsageError(f"{path} is not mounted at its host path in this container")
        roots.add(local[: len(local) - len(str(path))] or "/")
    if len(roots) != 1:
        raise click.UsageError(f"host folders are mounted from different roots: {sorted(roots)}")
    return Path(roots.pop())


def in_cluster(opts: dict[str, Any], view: virtual.View) -> None:
    """Translate ``kubeconfig``, or name the container's ServiceAccount and API server."""
    if opts.get("kubeconfig") is not None:
        opts["kubeconfig"] = view.host_path(opts["kubeconfig"])
        return
    host = view.env.get("KUBERNETES_SERVICE_HOST", "")
    port = view.env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise click.UsageError("KUBERNETES_SERVICE_HOST is not set and no --kubeconfig given")
    opts["service_account_dir"] = view.host_path(SERVICE_ACCOUNT)
    opts["api_server"] = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def daemon_command() -> click.Command:
    """The click command of ``cdctl daemon run`` (built from ``cli.daemonopts``)."""
    command: click.Command = daemon_cli.group.commands["run"]
    return command


def _local(opts: dict[str, Any], view: virtual.View, *names: str) -> None:
    for name in names:
        if opts.get(name) is not None:
            opts[name] = view.host_path(opts[name])


def _configure_log(view: virtual.View, level: str, fmt: str) -> None:
    if view.log is not None:
        view.log.configure(level, "json" if fmt.lower() == "json" else "text")


async def run_plugin(view: virtual.View) -> int:
    """``cdctl plugin run`` of a virtual node (see the module docstring)."""
    opts = resolve(plugin_cli.run, view.argv[3:], view.env)
    _configure_log(view, opts["log_level"], opts["log_format"])
    opts["host_root"] = node_root(
        view, (opts["registrar_dir"], opts["plugins_dir"], opts["cdi_root"])
    )
    _local(
        opts,
        view,
        "proc_devices_path",
        "boot_id_path",
        "fabric_imex_mgmt_path",
        "container_driver_root",
        "imex_config_template",
    )
    in_cluster(opts, view)
    settings = plugin_cli.plugin_settings(opts)
    plugin_cli.log_start(settings)
    folders = [view.host_path(p) for p in view.env.get("LD_LIBRARY_PATH", "").split(":") if p]
    library = nvmllib.find_library(folders) or view.host_path("/usr/lib64") / nvmllib.LIBRARY_NAME
    nvml = discovery.NvmlDiscovery(
        proc_devices=settings.paths.proc_devices,
        strict_fabric=settings.strict_fabric,
        nvml=nvmllib.LibraryNvml(library),
    )
    await plugin_app.Plugin(settings, nvml, informers=view.informers).run()
    return 0


async def run_daemon(view: virtual.View) -> int:
    """``cdctl daemon run`` of a virtual node (see the module docstring)."""
    started = steps.boottime()
    opts = resolve(daemon_command(), view.argv[3:], view.env)
    _configure_log(view, opts["log_verbosity"], opts["log_format"])
    # imexd.cfg names the nodes file as every container of the domain sees it (IMEX and the
    # workloads mount the domain folder); the daemon writes it through the node's folder.
    opts["imex_nodes_config_name"] = opts["imex_nodes_config"]
    _local(opts, view, "imex_config", "imex_nodes_config", "imex_config_template", "hosts_file")
    in_cluster(opts, view)
    metrics = daemon_metrics.DaemonMetrics()
    timeline = steps.Steps(
        started_at=started, on_step=metrics.step, fields={"node": opts["node_name"]}
    )
    settings = daemon_cli.daemon_settings(opts)
    timeline.mark(steps.SETTINGS_LOADED)
    imex = imex_inproc.InProcessImex(view.host_path)
    await daemon_cli.run_daemon(settings, metrics, timeline, imex, informers=view.informers)
    return 0


def agent_command() -> click.Command:
    """The click command of ``cdctl agent run``."""
    command: click.Command = agent_cli.group.commands["run"]
    return command


async def run_agent(view: virtual.View) -> int:
    """``cdctl agent run`` of a virtual node: the agent writes each CD's folder through the
    node's folder, and IMEX (the in-process stand-in) sees it at the container's path."""
    opts = resolve(agent_command(), view.argv[3:], view.env)
    _configure_log(view, opts["log_verbosity"], opts["log_format"])
    container_dir = Path(opts["domains_dir"])
    _local(opts, view, "hosts_file")
    in_cluster(opts, view)
    settings = agent_cli.agent_settings(opts, domains_dir=view.host_path(container_dir))
    build = agent_cli.factory(opts, seen_as=lambda d: container_dir / d.assignment.domain_uid)
    imex = imex_inproc.InProcessImex(view.host_path)
    await agent_cli.run_agent(settings, build, imex, informers=view.informers)
    return 0


def programs(project_bin: Path) -> virtual.Programs:
    """The table of in-process programs: this installation's ``cdctl`` (found in
    ``project_bin`` on the container's PATH) running ``plugin run`` or ``daemon run``, and the
    simulator's ``mnnvl-workload`` stand-in."""
    ours = project_bin / "cdctl"

    def lookup(view: virtual.View) -> virtual.Program | None:
        argv = view.argv
        if argv and Path(argv[0]).name == _WORKLOAD:
            found = shutil.which(argv[0], path=view.env.get("PATH", ""))
            if found is not None and standins.runs_here(Path(found), _WORKLOAD):
                return workload_inproc.run
            return None
        if len(argv) < 3 or argv[0] not in ("cdctl", str(ours)):
            return None
        found = shutil.which(argv[0], path=view.env.get("PATH", ""))
        if found is None or Path(found) != ours:
            return None  # another installation's cdctl (an earlier release): a process
        if argv[1:3] == ("plugin", "run"):
            return run_plugin
        if argv[1:3] == ("daemon", "run"):
            return run_daemon
        if argv[1:3] == ("agent", "run"):
            return run_agent
        return None

    return lookup
