"""``cdctl validate node|imex-channels|nccl``: prove the node's GPU stack on real hardware.

Each command prints a report (``-o text`` or ``-o json``) whose last text line is the verdict,
and exits 0 (PASS, WARN, SKIP), 1 (FAIL or an error) or 3 (no NVIDIA GPU on this machine: one
line on stderr). The environment is read here and passed down as settings: the workload
containers and NCCL workers get this interpreter, this package on ``PYTHONPATH`` and NVLink
multicast off. ``python -m compute_domains.cli.validate`` runs the same group without the
rest of ``cdctl`` (for GPU machines that lack the control plane's dependencies).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import click

import compute_domains
from compute_domains.infra import errors
from compute_domains.validate import channels, nccl, node, report

_OUTPUT = click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Report format.",
)
_WORK_DIR = click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep specs, logs and results here (default: a temporary folder, removed after).",
)
_JSON_FILE = click.option(
    "--json-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the JSON report to this file.",
)
_PASSED_ENV = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH")


def _package_root() -> Path:
    """The folder holding the ``compute_domains`` package (put on ``PYTHONPATH``)."""
    return Path(compute_domains.__file__).resolve().parent.parent


def _python_path() -> str:
    rest = os.environ.get("PYTHONPATH", "")
    return f"{_package_root()}:{rest}" if rest else str(_package_root())


@contextlib.contextmanager
def _work_dir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="cd-validate-") as tmp:
        yield Path(tmp)


def _emit(
    ctx: click.Context,
    build: Callable[[], report.Report],
    output: str,
    json_file: Path | None = None,
) -> None:
    """Run ``build``, print its report, exit with the report's code (3 without a GPU).

    ``sys.exit`` rather than ``ctx.exit``: ``cdctl`` runs click with ``standalone_mode=False``,
    where a click ``Exit`` code is returned, not used as the process's exit status.
    """
    try:
        result = build()
    except report.NoGpuError as err:
        click.echo(f"validate {ctx.info_name}: {err}", err=True)
        sys.exit(report.NO_GPU_EXIT)
    except errors.ComputeDomainsError as err:
        click.secho(f"validate {ctx.info_name}: error: {err}", fg="red", err=True)
        sys.exit(1)
    click.echo(report.render(result, output), nl=False)
    if json_file is not None:
        json_file.write_text(report.render_json(result))
    if result.exit_code:
        sys.exit(result.exit_code)


@click.group("validate")
def group() -> None:
    """Validate a real GPU node: discovery, IMEX channel injection, NVLink NCCL baseline."""


@group.command("node")
@_OUTPUT
@_JSON_FILE
@click.option(
    "--driver-root",
    envvar="NVIDIA_DRIVER_ROOT",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/"),
    show_default=True,
    help="The NVIDIA driver installation (the chart's nvidiaDriverRoot). Env NVIDIA_DRIVER_ROOT.",
)
@click.pass_context
def node_cmd(ctx: click.Context, output: str, json_file: Path | None, driver_root: Path) -> None:
    """What the kubelet plugin would publish here: driver, GPUs, fabric, clique, majors, and
    what its base CDI spec would mount into IMEX daemons from the driver root."""
    settings = node.NodeSettings(driver_root=driver_root)
    _emit(ctx, lambda: node.build_report(node.gather(settings)), output, json_file)


@group.command("imex-channels")
@_OUTPUT
@_JSON_FILE
@_WORK_DIR
@click.option(
    "--channel",
    "same",
    type=click.IntRange(0, 2047),
    default=0,
    show_default=True,
    help="Channel N shared by the exporter and the same-channel importer.",
)
@click.option(
    "--other-channel",
    "other",
    type=click.IntRange(0, 2047),
    default=1,
    show_default=True,
    help="Channel M of the other-channel importer.",
)
@click.option(
    "--per-clique",
    is_flag=True,
    help="Take N and M from the per-clique scope's allocator: the channels two ComputeDomains "
    "on one clique get (overrides --channel and --other-channel).",
)
@click.option("--all-gpus", is_flag=True, help="Give every container all GPUs, not only its own.")
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds.")
@click.pass_context
def channels_cmd(
    ctx: click.Context,
    output: str,
    json_file: Path | None,
    work_dir: Path | None,
    same: int,
    other: int,
    per_clique: bool,
    all_gpus: bool,
    timeout: float,
) -> None:
    """Show that a channel from the plugin's CDI output grants fabric memory (needs root)."""
    scope = "perDomain (Single mode: channel 0) unless --channel/--other-channel say otherwise"
    if per_clique:
        same, other = channels.per_clique_pair()
        scope = "perClique: channels api.sharedimex.allocate gives two CDs on one clique"
    env = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
    env |= {"PYTHONPATH": _python_path(), "PYTHONUNBUFFERED": "1", "HOME": "/tmp"}
    env |= nccl.NVLS_OFF
    with _work_dir(work_dir) as work:
        settings = channels.ChannelSettings(
            work_dir=work,
            probe_argv=(sys.executable, "-m", "compute_domains.validate.cuda_probe"),
            env=env,
            python=sys.executable,
            extra_system_dirs=(str(_package_root()),),
            same_channel=same,
            other_channel=other,
            scope=scope,
            timeout_s=timeout,
            all_gpus=all_gpus,
        )
        _emit(ctx, lambda: channels.validate(settings), output, json_file)


@group.command("nccl")
@_OUTPUT
@_JSON_FILE
@_WORK_DIR
@click.option(
    "--min-busbw",
    type=float,
    default=None,
    help="Pass threshold in GB/s (default: the table entry for this GPU type).",
)
@click.option("--iters", type=click.IntRange(1), default=20, show_default=True)
@click.option("--warmup", type=click.IntRange(0), default=5, show_default=True)
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds.")
@click.pass_context
def nccl_cmd(
    ctx: click.Context,
    output: str,
    json_file: Path | None,
    work_dir: Path | None,
    min_busbw: float | None,
    iters: int,
    warmup: int,
    timeout: float,
) -> None:
    """All-reduce across this node's GPUs, 512 MB to 8 GB: algbw and busbw as nccl-tests."""
    env = {**os.environ, "PYTHONPATH": _python_path()}
    with _work_dir(work_dir) as work:
        settings = nccl.NcclSettings(
            work_dir=work,
            worker_argv=(sys.executable, "-m", "compute_domains.validate.nccl_worker"),
            env=env,
            iters=iters,
            warmup=warmup,
            timeout_s=timeout,
            min_busbw_gbps=min_busbw,
        )
        _emit(ctx, lambda: nccl.validate(settings), output, json_file)


if __name__ == "__main__":
    group(prog_name="cdctl validate")
