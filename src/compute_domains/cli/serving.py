"""What the three component commands (controller, kubelet plugin, daemon) share: their common
flags and the way a component process runs until SIGTERM.

A component's first SIGTERM or SIGINT cancels its ``run()``; if the graceful stop takes longer
than ``--shutdown-timeout`` the process exits anyway (a pod must never hang in Terminating
because one step of the stop is stuck).

click is imported by the flag helpers only: ``cdctl daemon run`` starts through ``cli.entry``
without click and uses :func:`serve` alone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from compute_domains.infra import kube, logs

if TYPE_CHECKING:
    import click

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

LEVEL_HELP = logs.LEVEL_HELP


def check_level(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Option callback for log levels: a name or a klog verbosity (``infra.logs.level_number``).

    Returns the level as normal text (``"06"`` becomes ``"6"``); a usage error names what is
    accepted, before anything runs.
    """
    import click

    if value is None:
        return None
    try:
        return logs.normal_level(str(value))
    except ValueError as err:
        raise click.BadParameter(str(err), ctx, param) from err


def log_options(fn: F) -> F:
    """``--log-level`` (env ``LOG_LEVEL`` or ``LOG_VERBOSITY``) and ``--log-format``."""
    import click

    fn = click.option(
        "--log-format",
        envvar="LOG_FORMAT",
        type=click.Choice(["text", "json"], case_sensitive=False),
        default="text",
        show_default=True,
        help="Log line format. Env LOG_FORMAT.",
    )(fn)
    return click.option(
        "--log-level",
        envvar=["LOG_LEVEL", "LOG_VERBOSITY"],
        callback=check_level,
        default="info",
        show_default=True,
        help=f"Log level: {LEVEL_HELP}. Env LOG_LEVEL or LOG_VERBOSITY.",
    )(fn)


def kubeconfig_option(fn: F) -> F:
    """``--kubeconfig`` (env ``KUBECONFIG``); in-cluster ServiceAccount when unset."""
    import click

    return click.option(
        "--kubeconfig",
        envvar="KUBECONFIG",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Kubeconfig file; in-cluster ServiceAccount when unset. Env KUBECONFIG.",
    )(fn)


def shutdown_timeout_option(default: float) -> Callable[[F], F]:
    """``--shutdown-timeout`` (env ``SHUTDOWN_TIMEOUT``) with the component's own default."""
    import click

    return click.option(
        "--shutdown-timeout",
        envvar="SHUTDOWN_TIMEOUT",
        type=click.FloatRange(min=1.0),
        default=default,
        show_default=True,
        help="Seconds a stop may take before the process exits anyway.",
    )


def setup_logs(level: str, log_format: str) -> logs.LogFormat:
    """Configure logging from the flags; returns the format (components pass it on)."""
    fmt: logs.LogFormat = "json" if log_format.lower() == "json" else "text"
    logs.setup(level, fmt)
    # NVIDIA's startup line names the verbosity too ("Verbosity"); its tooling greps for it.
    logger.info(
        "logging: Verbosity: %s (level %s), format %s",
        level,
        logging.getLevelName(logs.level_number(level)),
        fmt,
    )
    return fmt


def component_kube(opts: Mapping[str, Any], field_manager: str) -> kube.KubeSettings:
    """The API access of a component that runs in a pod (plugin, daemon): a kubeconfig when
    given, else the pod's ServiceAccount (``service_account_dir``, ``api_server`` come from
    ``cli/inprocess`` on virtual nodes)."""
    return kube.KubeSettings(
        kubeconfig=opts["kubeconfig"],
        service_account_dir=opts.get("service_account_dir"),
        api_server=opts.get("api_server"),
        field_manager=field_manager,
    )


async def serve(run: Coroutine[Any, Any, None], name: str, shutdown_timeout: float) -> None:
    """Run a component's ``run()`` coroutine until it ends or a signal stops it.

    Returns normally after a signal-initiated stop; a failure of ``run`` propagates.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(run, name=name)

    def stop(signum: int) -> None:
        logger.info("received %s; stopping", signal.Signals(signum).name)
        task.cancel()
        loop.call_later(shutdown_timeout, _force_exit)

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    try:
        await task
    except asyncio.CancelledError:
        if not task.cancelled():
            raise


def _force_exit() -> None:
    logger.error("graceful stop took too long; exiting")
    logging.shutdown()
    os._exit(1)
