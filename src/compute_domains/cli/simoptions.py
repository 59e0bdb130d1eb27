"""Options the ``cdctl sim`` commands share: sim name, cluster shape, image map (→ sim settings)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from compute_domains.cli import options
from compute_domains.sim import state, topology

NAME = click.option(
    "--name",
    default="default",
    show_default=True,
    envvar="CD_SIMNAME",
    help="Sim name; several sims can run side by side.",
)


IMAGE_MAP = click.option(
    "--image-map",
    "image_map",
    multiple=True,
    metavar="REPOSITORY=FOLDER",
    help="Run containers of image REPOSITORY (any tag) from FOLDER, a folder laid out as the "
    "image's filesystem (e.g. FOLDER/usr/bin/<programs>); repeatable.",
)


NODES_MODE = click.option(
    "--nodes-mode",
    type=click.Choice(["process", "virtual"]),
    default="process",
    show_default=True,
    help="How nodes run their containers: a process each (fidelity; any driver's images), or "
    "virtual: the project's plugin and daemons, the IMEX stand-in and pause containers as tasks "
    "of the sim's process (scale); other containers stay processes.",
)

RACKS_PER_HOST = click.option(
    "--racks-per-host",
    type=click.IntRange(1),
    default=None,
    help="Virtual nodes: run them in node host processes of this many racks each, each with "
    "its own event loop and open-files limit [default: 8 racks a host for shapes of more "
    "than 8 racks; smaller ones run in the sim's own process].",
)


def image_map(items: tuple[str, ...]) -> tuple[tuple[str, Path], ...]:
    """``--image-map`` values as (repository, folder) pairs.

    Raises:
        click.BadParameter: an item is not ``REPOSITORY=FOLDER`` or the folder is missing.
    """
    out = []
    for item in items:
        repo, _, folder = item.partition("=")
        path = Path(folder).resolve()
        if not repo or not folder or ":" in repo.rsplit("/", 1)[-1]:
            raise click.BadParameter(
                f"{item!r}: expected REPOSITORY=FOLDER (a repository without a tag)",
                param_hint="--image-map",
            )
        if not path.is_dir():
            raise click.BadParameter(f"{item!r}: {path} is not a folder", param_hint="--image-map")
        out.append((repo, path))
    return tuple(out)


def paths(name: str) -> state.SimPaths:
    """The folders of sim ``name`` under the sim home."""
    return state.SimPaths(options.sim_home(), name)


def shape_options(f: Callable[..., None]) -> Callable[..., None]:
    """Add the cluster-shape options (racks, nodes per rack, GPUs, plain nodes, fabric faults)."""
    for opt in reversed(
        [
            click.option(
                "--racks",
                type=click.IntRange(0),
                default=2,
                show_default=True,
                help="NVL72-like racks; each is one NVLink domain (clique).",
            ),
            click.option("--nodes-per-rack", type=click.IntRange(1), default=18, show_default=True),
            click.option("--gpus-per-node", type=click.IntRange(1), default=4, show_default=True),
            click.option(
                "--plain-nodes",
                type=click.IntRange(0),
                default=0,
                show_default=True,
                help="GPU nodes without multi-node NVLink (all-zero cluster UUID).",
            ),
            click.option(
                "--fabric",
                "fabric",
                multiple=True,
                metavar="NODE=STATE",
                help="Fabric fault for one node: in-progress, error, not-supported.",
            ),
        ]
    ):
        f = opt(f)
    return f


def shape(
    racks: int, nodes_per_rack: int, gpus_per_node: int, plain_nodes: int, fabric: tuple[str, ...]
) -> topology.Shape:
    """The cluster shape from the ``shape_options`` values.

    Raises:
        click.BadParameter: a ``--fabric`` item is not ``NODE=STATE``.
    """
    faults = []
    for item in fabric:
        node, _, fstate = item.partition("=")
        if fstate not in ("in-progress", "error", "not-supported", "completed"):
            raise click.BadParameter(
                f"{item!r}: expected NODE=in-progress|error|not-supported", param_hint="--fabric"
            )
        faults.append((node, fstate))
    return topology.Shape(
        racks=racks,
        nodes_per_rack=nodes_per_rack,
        gpus_per_node=gpus_per_node,
        plain_nodes=plain_nodes,
        fabric_faults=tuple(faults),
    )
