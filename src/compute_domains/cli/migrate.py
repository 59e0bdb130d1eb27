"""``cdctl migrate prepare``: step 3 of docs/upgrade.md's switch from NVIDIA's chart to ours.

Run before ``helm uninstall`` of NVIDIA's release: it keeps the daemons' ServiceAccount through
the uninstall and hands it to our release (``migrate.prepare``), then prints the values the user
gave NVIDIA's release as ``--set-json`` flags for our ``helm install``. Talks to the cluster of
``--kubeconfig`` (default ``$KUBECONFIG``, then ``~/.kube/config``). Bad input or a missing
release is one clear line and exit status 1.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from compute_domains.api import names
from compute_domains.infra import errors, kube
from compute_domains.migrate import helmrelease, prepare


@click.group()
def group() -> None:
    """Switch a cluster from NVIDIA's ComputeDomain driver to ours (docs/upgrade.md)."""


@group.command("prepare")
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path),
    envvar="KUBECONFIG",
    default=None,
    help="Kubeconfig (default: $KUBECONFIG, then ~/.kube/config).",
)
@click.option(
    "--release", default="nvidia-dra-driver-gpu", show_default=True, help="NVIDIA's release."
)
@click.option(
    "-n", "--namespace", default="nvidia-dra-driver-gpu", show_default=True, help="Its namespace."
)
@click.option(
    "--to-release",
    default="compute-domains",
    show_default=True,
    help="The name our release will have (it takes over the daemons' ServiceAccount).",
)
def prepare_command(kubeconfig: Path | None, release: str, namespace: str, to_release: str) -> None:
    """Keep the daemons' ServiceAccount through NVIDIA's uninstall; print its values as flags."""
    if kubeconfig is None:
        default = Path.home() / ".kube" / "config"
        kubeconfig = default if default.exists() else None
    elif not kubeconfig.is_file():
        raise click.ClickException(f"kubeconfig {kubeconfig} not found")
    settings = prepare.PrepareSettings(release=release, namespace=namespace, to_release=to_release)

    async def main() -> prepare.Prepared:
        client = kube.client(
            kube.KubeSettings(kubeconfig=kubeconfig, field_manager="cdctl-migrate")
        )
        try:
            return await prepare.prepare(client, settings)
        finally:
            await client.close()

    try:
        done = asyncio.run(main())
    except (helmrelease.ReleaseError, errors.ComputeDomainsError) as err:
        raise click.ClickException(str(err)) from None
    account = f"{namespace}/{names.DAEMON_SERVICE_ACCOUNT}"
    how = "now keeps" if done.record_changed else "already kept"
    click.echo(
        f"release {release} (revision {done.revision}): helm uninstall {how} ServiceAccount "
        f"{account} (uid {done.account_uid}); release {to_release} takes it over at its install"
    )
    for key, value in done.left_out:
        click.echo(f"not carried over: {key}={value} (NVIDIA's image)")
    click.echo(f"values for helm install: {done.set_flags()}")
