"""``cdctl job launch|status|replace-rank|replace-lost|keep|delete``: the platform job controller.

The command line of ``compute_domains.jobs`` (docs/jobs.md): ``launch`` takes the domains a
platform scheduler allocated (``--domain <clusterUUID>:<nodes>``, in rank order) and creates
the job's ComputeDomain, shared RDMA template and one pod per node; ``replace-rank`` and
``replace-lost`` give lost ranks new pods in their own domain, once; ``keep`` does it whenever
a rank is lost, until stopped. Every command talks to the cluster of ``--kubeconfig`` (default
``$KUBECONFIG``, then ``~/.kube/config``) and prints text or, with ``-o json``, one JSON
document. Bad input is one clear line and exit status 1.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from compute_domains.infra import kube
from compute_domains.jobs import keeper, kubeio, launcher, ranks
from compute_domains.jobs import spec as specs

T = TypeVar("T")

_KUBECONFIG = click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path),
    envvar="KUBECONFIG",
    default=None,
    help="Kubeconfig (default: $KUBECONFIG, then ~/.kube/config).",
)
_NAMESPACE = click.option(
    "-n", "--namespace", default="default", show_default=True, help="The job's namespace."
)
_OUTPUT = click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True
)


def _run(kubeconfig: Path | None, work: Callable[[kubeio.Api], Awaitable[T]]) -> T:
    if kubeconfig is None:
        default = Path.home() / ".kube" / "config"
        kubeconfig = default if default.exists() else None
    elif not kubeconfig.is_file():
        raise click.ClickException(f"kubeconfig {kubeconfig} not found")

    async def main() -> T:
        client = kube.client(kube.KubeSettings(kubeconfig=kubeconfig, field_manager="cdctl-job"))
        try:
            return await work(kubeio.Api(client))
        finally:
            await client.close()

    return asyncio.run(main())


def parse_domain(value: str) -> specs.Domain:
    """``<clusterUUID>:<nodes>`` → a ``Domain``.

    Raises:
        click.BadParameter: the value is not of that form.
    """
    uuid, sep, count = value.rpartition(":")
    try:
        nodes = int(count)
    except ValueError:
        nodes = -1
    if not sep or not uuid or nodes < 0:
        raise click.BadParameter(f"{value!r} is not <clusterUUID>:<node count>")
    return specs.Domain(cluster_uuid=uuid, node_count=nodes)


def _domains(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[specs.Domain, ...]:
    return tuple(parse_domain(v) for v in values)


@click.group("job")
def group() -> None:
    """The guide's platform job controller (§15.5): one CD over the allocated domains."""


@group.command("launch")
@click.argument("name")
@click.argument("command", nargs=-1)
@click.option(
    "--domain",
    "domains",
    multiple=True,
    required=True,
    callback=_domains,
    metavar="UUID:NODES",
    help="An allocated NVLink domain: its nvidia.com/gpu.clusteruuid and how many of its nodes "
    "the job gets. Repeat in rank order (ranks fill the first domain first).",
)
@_NAMESPACE
@click.option(
    "--rdma/--no-rdma",
    default=True,
    show_default=True,
    help="Give every pod the shared RDMA claim (needs DRANET and the rdma-devices DeviceClass).",
)
@click.option("--rdma-nics", default=4, show_default=True, help="RDMA NICs per pod.")
@click.option("--image", default=specs.DEFAULT_IMAGE, show_default=True, help="Container image.")
@click.option("--gpus", default=4, show_default=True, help="nvidia.com/gpu limit per pod.")
@click.option("--priority-class", default="", help="priorityClassName of every pod.")
@click.option(
    "--template-timeout",
    default=60.0,
    show_default=True,
    help="Seconds to wait for the driver to create the CD's channel template.",
)
@_KUBECONFIG
@_OUTPUT
def launch(
    name: str,
    command: tuple[str, ...],
    domains: tuple[specs.Domain, ...],
    namespace: str,
    rdma: bool,
    rdma_nics: int,
    image: str,
    gpus: int,
    priority_class: str,
    template_timeout: float,
    kubeconfig: Path | None,
    output: str,
) -> None:
    """Create job NAME: its ComputeDomain, RDMA template and one pod per node.

    COMMAND (after --) is the container's command; without it the image's entrypoint runs.
    Running it again creates only what is missing.
    """
    job = specs.checked(
        specs.JobSpec(
            name=name,
            domains=domains,
            namespace=namespace,
            image=image,
            command=command,
            gpus=gpus,
            rdma=rdma,
            rdma_nics=rdma_nics,
            priority_class=priority_class,
        )
    )
    done = _run(
        kubeconfig, lambda api: launcher.launch(api, job, template_timeout_s=template_timeout)
    )
    if output == "json":
        click.echo(json.dumps(dataclasses.asdict(done), indent=1))
        return
    for what in done.created:
        click.echo(f"created {what}")
    for what in done.kept:
        click.echo(f"kept    {what} (exists)")


def _row(state: ranks.RankState) -> dict[str, Any]:
    pod = state.live
    return {
        "rank": state.rank,
        "clusterUUID": state.cluster_uuid,
        "pod": str(pod.metadata.name) if pod and pod.metadata else "",
        "node": str(pod.spec.nodeName or "") if pod and pod.spec else "",
        "phase": str(pod.status.phase or "") if pod and pod.status else "",
        "lost": [f"{p.metadata.name}: {why}" for p, why in state.lost if p.metadata],
    }


@group.command("status")
@click.argument("name")
@_NAMESPACE
@_KUBECONFIG
@_OUTPUT
def status(name: str, namespace: str, kubeconfig: Path | None, output: str) -> None:
    """Every rank of job NAME: its domain, pod, node and phase, or why it is lost."""

    async def work(api: kubeio.Api) -> list[ranks.RankState]:
        return await launcher.status(api, await launcher.load(api, name, namespace))

    rows = [_row(s) for s in _run(kubeconfig, work)]
    if output == "json":
        click.echo(json.dumps(rows, indent=1))
        return
    table = Table("rank", "domain", "pod", "node", "phase", "lost")
    for row in rows:
        table.add_row(
            str(row["rank"]),
            row["clusterUUID"],
            row["pod"] or "-",
            row["node"] or "-",
            row["phase"] or "LOST",
            "; ".join(row["lost"]),
        )
    Console().print(table)


def _print_replaced(done: list[launcher.Replaced], output: str) -> None:
    if output == "json":
        click.echo(json.dumps([dataclasses.asdict(r) for r in done], indent=1))
        return
    if not done:
        click.echo("no rank is lost")
    for r in done:
        _echo_replaced(r)


@group.command("replace-rank")
@click.argument("name")
@click.argument("rank", type=int)
@click.option("--force", is_flag=True, help="Replace the rank even while its pod is live.")
@_NAMESPACE
@_KUBECONFIG
@_OUTPUT
def replace_rank(
    name: str, rank: int, force: bool, namespace: str, kubeconfig: Path | None, output: str
) -> None:
    """Give RANK of job NAME a new pod pinned to the rank's own domain (§15.6 rule 3)."""

    async def work(api: kubeio.Api) -> launcher.Replaced:
        job = await launcher.load(api, name, namespace)
        return await launcher.replace_rank(api, job, rank, force=force)

    _print_replaced([_run(kubeconfig, work)], output)


@group.command("replace-lost")
@click.argument("name")
@_NAMESPACE
@_KUBECONFIG
@_OUTPUT
def replace_lost(name: str, namespace: str, kubeconfig: Path | None, output: str) -> None:
    """Replace every lost rank of job NAME (no pod, pod ended or deleted, node not Ready)."""

    async def work(api: kubeio.Api) -> list[launcher.Replaced]:
        return await launcher.replace_lost(api, await launcher.load(api, name, namespace))

    _print_replaced(_run(kubeconfig, work), output)


def _echo_replaced(r: launcher.Replaced) -> None:
    removed = f" (removed {'; '.join(r.removed)})" if r.removed else ""
    click.echo(f"rank {r.rank}: created pod {r.pod} in domain {r.cluster_uuid}{removed}")


@group.command("keep")
@click.argument("name")
@_NAMESPACE
@_KUBECONFIG
def keep(name: str, namespace: str, kubeconfig: Path | None) -> None:
    """Keep job NAME whole: replace each rank in its own domain as it is lost (until Ctrl-C)."""

    async def work(api: kubeio.Api) -> None:
        job = await launcher.load(api, name, namespace)
        click.echo(f"keeping {job.world_size} ranks of job {namespace}/{name}")
        await keeper.Keeper(api, job, on_replaced=_echo_replaced).run()

    _run(kubeconfig, work)


@group.command("delete")
@click.argument("name")
@_NAMESPACE
@_KUBECONFIG
def delete(name: str, namespace: str, kubeconfig: Path | None) -> None:
    """Delete job NAME: its pods, its RDMA template and its ComputeDomain."""

    async def work(api: kubeio.Api) -> list[str]:
        return await launcher.delete(api, await launcher.load(api, name, namespace))

    for what in _run(kubeconfig, work):
        click.echo(f"deleted {what}")
