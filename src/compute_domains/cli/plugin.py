"""``cdctl plugin ...``: run the plugin component (flags and environment → settings → ``run()``).

``cdctl plugin run`` is what the Helm chart's DaemonSet runs on every GPU node. Its parameters
become settings in ``plugin_settings`` (also used by ``cli.inprocess``, which runs the same
command inside a simulator process for a virtual node). Every flag has
an environment variable (upstream's names where upstream has the setting), so the chart
configures it through ``env``. SIGTERM or SIGINT cancels the plugin; it stops its gRPC servers
and removes its sockets within ``--shutdown-timeout`` seconds, after which the process exits
regardless. A start-up failure (fabric not ready, corrupt checkpoint, ...) exits with code 1
and one clear line, so the pod crash-loops visibly until the cause is gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from compute_domains.api import featuregates, nodemark
from compute_domains.cli import serving
from compute_domains.plugin import app, config, discovery

logger = logging.getLogger(__name__)

_DIR = click.Path(file_okay=False, path_type=Path)
_FILE = click.Path(dir_okay=False, path_type=Path)
_PORT = click.IntRange(0, 65535)


@click.group("plugin")
def group() -> None:
    """The plugin component (as the Helm chart runs it)."""


@group.command("run")
@click.option("--node-name", envvar="NODE_NAME", required=True, help="Node served. Env NODE_NAME.")
@click.option(
    "--namespace",
    envvar=["POD_NAMESPACE", "NAMESPACE"],
    default="default",
    show_default=True,
    help="Driver namespace (ComputeDomainCliques are read there). Env POD_NAMESPACE.",
)
@click.option(
    "--kubelet-registrar-directory-path",
    "registrar_dir",
    envvar="KUBELET_REGISTRAR_DIRECTORY_PATH",
    type=_DIR,
    default=Path("/var/lib/kubelet/plugins_registry"),
    show_default=True,
    help="Kubelet plugin-registration folder (host path).",
)
@click.option(
    "--kubelet-plugins-directory-path",
    "plugins_dir",
    envvar="KUBELET_PLUGINS_DIRECTORY_PATH",
    type=_DIR,
    default=Path("/var/lib/kubelet/plugins"),
    show_default=True,
    help="Kubelet plugin data folder (host path).",
)
@click.option(
    "--cdi-root",
    envvar="CDI_ROOT",
    type=_DIR,
    default=Path("/var/run/cdi"),
    show_default=True,
    help="CDI spec folder of the container runtime (host path).",
)
@click.option(
    "--host-root",
    envvar="HOST_ROOT",
    type=_DIR,
    default=Path("/"),
    show_default=True,
    help="Where the host paths above are reachable from this process (simulated nodes).",
)
@click.option(
    "--proc-devices-path",
    envvar="PROC_DEVICES_PATH",
    type=_FILE,
    default=Path("/proc/devices"),
    show_default=True,
    help="The kernel's device-major table. Env PROC_DEVICES_PATH.",
)
@click.option(
    "--boot-id-path",
    envvar="BOOT_ID_PATH",
    type=_FILE,
    default=Path("/proc/sys/kernel/random/boot_id"),
    show_default=True,
    help="The kernel boot ID file. Env BOOT_ID_PATH.",
)
@click.option(
    "--fabric-imex-mgmt-path",
    envvar="FABRIC_IMEX_MGMT_PATH",
    type=_FILE,
    default=Path("/proc/driver/nvidia/capabilities/fabric-imex-mgmt"),
    show_default=True,
    help="The fabric-imex-mgmt capability file (daemon claims on MNNVL nodes).",
)
@click.option(
    "--nvidia-driver-root",
    envvar=["NVIDIA_DRIVER_ROOT", "HOST_DRIVER_ROOT"],
    type=_DIR,
    default=Path("/"),
    show_default=True,
    help="Host path of the NVIDIA driver installation (IMEX programs, libraries, device nodes)."
    " Env NVIDIA_DRIVER_ROOT.",
)
@click.option(
    "--container-driver-root",
    envvar="DRIVER_ROOT_CTR_PATH",
    type=_DIR,
    default=None,
    help="Where this container sees the driver root (the chart mounts it at /driver-root);"
    " unset: reached like any host path. Env DRIVER_ROOT_CTR_PATH.",
)
@click.option(
    "--imex-config-template",
    envvar="IMEX_CONFIG_TEMPLATE",
    type=_FILE,
    default=None,
    help="IMEX config template placed in each per-CD folder; none: the daemon's built-in one.",
)
@click.option(
    "--strict-fabric/--no-strict-fabric",
    envvar="STRICT_FABRIC",
    default=True,
    show_default=True,
    help="Refuse to start while the NVLink fabric registers or is in error.",
)
@click.option(
    "--channel-slots",
    envvar="CHANNEL_SLOTS",
    type=click.IntRange(1, config.MAX_CHANNEL_SLOTS),
    default=8,
    show_default=True,
    help="Channel devices published per node (pods of one ComputeDomain per node).",
)
@click.option(
    "--holder-publish-delay",
    envvar="HOLDER_PUBLISH_DELAY",
    type=click.FloatRange(0, 30),
    default=0.0,
    show_default=True,
    help="Fault drill only: seconds before a holder change reaches the ResourceSlice.",
)
@click.option(
    "--quarantine-corrupt-checkpoint/--no-quarantine-corrupt-checkpoint",
    envvar="QUARANTINE_CORRUPT_CHECKPOINT",
    default=False,
    show_default=True,
    help="Move a corrupt checkpoint aside and start empty instead of failing.",
)
@click.option(
    "--shared-imex-eager/--no-shared-imex-eager",
    envvar="SHARED_IMEX_EAGER",
    default=False,
    show_default=True,
    help="Per-clique scope: label the node for its clique's shared IMEX at start (unless a"
    " per-domain ComputeDomain holds it), so the IMEX runs before the first per-clique"
    " ComputeDomain. Off: the first per-clique claim labels it, and a start with no per-clique"
    " claim live removes the label. Env SHARED_IMEX_EAGER.",
)
@click.option(
    "--node-mark",
    envvar="NODE_MARK",
    type=click.Choice([f.value for f in nodemark.Form]),
    default=nodemark.Form.LABEL.value,
    show_default=True,
    help="How the node is marked for the per-domain ComputeDomain it serves: NVIDIA's node label"
    " (a per-CD DaemonSet selects its nodes by it), or an annotation of the same key (resident"
    " IMEX agents only; kube-scheduler re-queues no pod on it). Env NODE_MARK.",
)
@click.option(
    "--metrics-port",
    envvar="METRICS_PORT",
    type=_PORT,
    default=None,
    help="Port of /metrics and /healthz; unset disables. Env METRICS_PORT.",
)
@click.option(
    "--metrics-address",
    envvar="METRICS_ADDRESS",
    default="0.0.0.0",
    show_default=True,
    help="Address of the metrics (and gRPC health) server. Env METRICS_ADDRESS.",
)
@click.option(
    "--healthcheck-port",
    envvar="HEALTHCHECK_PORT",
    type=_PORT,
    default=None,
    help="Port of the grpc.health.v1 service; unset disables. Env HEALTHCHECK_PORT.",
)
@click.option(
    "--cleanup-interval",
    envvar="CLEANUP_INTERVAL",
    type=click.FloatRange(min=1.0),
    default=300.0,
    show_default=True,
    help="Seconds between cleanup passes.",
)
@serving.kubeconfig_option
@serving.log_options
@serving.shutdown_timeout_option(15.0)
def run(**opts: Any) -> None:
    """Run the DRA kubelet plugin of this node until SIGTERM."""
    serving.setup_logs(opts["log_level"], opts["log_format"])
    settings = plugin_settings(opts)
    log_start(settings)
    nvml = discovery.NvmlDiscovery(
        proc_devices=settings.paths.proc_devices, strict_fabric=settings.strict_fabric
    )
    asyncio.run(serving.serve(app.Plugin(settings, nvml).run(), "plugin", opts["shutdown_timeout"]))


def plugin_settings(opts: Mapping[str, Any]) -> config.PluginSettings:
    """The plugin's settings from the values of ``run``'s parameters (flags or environment)."""
    container_driver_root: Path | None = opts["container_driver_root"]
    return config.PluginSettings(
        node_name=opts["node_name"],
        driver_namespace=opts["namespace"],
        paths=config.PathSettings(
            host_root=opts["host_root"],
            registrar_dir=opts["registrar_dir"],
            plugins_dir=opts["plugins_dir"],
            cdi_root=opts["cdi_root"],
            proc_devices=opts["proc_devices_path"],
            boot_id=opts["boot_id_path"],
            fabric_imex_mgmt=opts["fabric_imex_mgmt_path"],
            driver_root=opts["nvidia_driver_root"],
            driver_root_local=container_driver_root,
            imex_config_template=opts["imex_config_template"],
        ),
        cleanup=config.CleanupSettings(interval_s=opts["cleanup_interval"]),
        metrics=config.MetricsSettings(
            port=opts["metrics_port"], bind_address=opts["metrics_address"]
        ),
        kube=serving.component_kube(opts, "compute-domain-plugin"),
        channel_slots=opts["channel_slots"],
        holder_publish_delay_s=opts["holder_publish_delay"],
        strict_fabric=opts["strict_fabric"],
        health_port=opts["healthcheck_port"],
        quarantine_corrupt_checkpoint=opts["quarantine_corrupt_checkpoint"],
        shared_imex_eager=opts["shared_imex_eager"],
        node_mark=nodemark.Form(opts.get("node_mark") or nodemark.Form.LABEL),
    )


def log_start(settings: config.PluginSettings) -> None:
    """The start-up line: settings, node name and the feature gates in effect (NVIDIA's line
    has them; tooling greps)."""
    logger.info(
        "starting plugin with %s; nodeName: %s, Feature gates: %s",
        settings,
        settings.node_name,
        featuregates.render(featuregates.effective(strict_fabric=settings.strict_fabric)),
    )
