"""Install the project's Helm chart into a simulated cluster, as a user deploys the driver.

The built ``helm`` installs ``deploy/helm/compute-domains`` (CRDs, DeviceClasses, RBAC, the
controller Deployment, the kubelet-plugin DaemonSet) into the driver namespace, with the one
simulator-only value that points NVML at each node's stand-in library. The components then run
as pods under the chart's ServiceAccounts, so an RBAC mistake fails here as it would for a
user.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

from compute_domains.sim import driverroot, errors

logger = logging.getLogger(__name__)

RELEASE = "compute-domains"

NAMESPACE = "compute-domains"
"""The driver namespace the sim installs our chart into (the release namespace)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DriverSettings:
    """Where the chart is and how to install it."""

    chart: Path
    """The chart folder (``deploy/helm/compute-domains``)."""
    namespace: str = NAMESPACE
    """The driver namespace (the release namespace)."""
    timeout_s: int = 300
    """How long helm waits for the driver's pods to be ready."""
    values: tuple[str, ...] = ()
    """Extra ``--set`` values."""


def helm_install_argv(
    helm: Path,
    kubeconfig: Path,
    *,
    release: str,
    chart: Path,
    namespace: str,
    timeout_s: int,
    values: tuple[str, ...] = (),
) -> list[str]:
    """``helm upgrade --install --wait`` of ``chart`` as ``release`` with ``--set`` values."""
    argv = [
        str(helm),
        "--kubeconfig",
        str(kubeconfig),
        "upgrade",
        "--install",
        release,
        str(chart),
        "--namespace",
        namespace,
        "--create-namespace",
        "--wait",
        "--timeout",
        f"{timeout_s}s",
    ]
    for value in values:
        argv += ["--set", value]
    return argv


async def install(settings: DriverSettings, helm: Path, kubeconfig: Path) -> None:
    """``helm upgrade --install`` the chart and wait until its pods are ready."""
    argv = helm_install_argv(
        helm,
        kubeconfig,
        release=RELEASE,
        chart=settings.chart,
        namespace=settings.namespace,
        timeout_s=settings.timeout_s,
        values=(f"nvidiaDriverRoot={driverroot.DRIVER_ROOT}", *settings.values),
    )
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    text = out.decode(errors="replace").strip()
    if proc.returncode != 0:
        raise errors.SimError(
            f"helm could not install the driver chart {settings.chart} "
            f"(exit {proc.returncode}):\n{text[-2000:]}"
        )
    logger.info("driver installed with helm into namespace %s", settings.namespace)
