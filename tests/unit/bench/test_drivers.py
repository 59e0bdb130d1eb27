"""Driver options of `cdctl bench formation` and the alternating plan of rounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from compute_domains.bench import drivers


def _ours(tmp_path: Path) -> drivers.DriverSpec:
    return drivers.DriverSpec(
        name="ours",
        chart=tmp_path / "ours-chart",
        release="compute-domains",
        namespace="compute-domains",
        values=("nvidiaDriverRoot=/run/nvidia/driver",),
    )


@pytest.fixture
def chart(tmp_path: Path) -> Path:
    folder = tmp_path / "nvidia-dra-driver-gpu"
    folder.mkdir()
    (folder / "Chart.yaml").write_text("name: nvidia-dra-driver-gpu\n")
    return folder


@pytest.fixture
def image(tmp_path: Path) -> Path:
    folder = tmp_path / "image"
    folder.mkdir()
    return folder


def test_without_driver_options_only_ours_runs(tmp_path: Path) -> None:
    assert drivers.parse(drivers=(), ours=_ours(tmp_path)) == (_ours(tmp_path),)


def test_a_named_chart_with_its_values_namespace_and_image_map(
    tmp_path: Path, chart: Path, image: Path
) -> None:
    ours, nvidia = drivers.parse(
        drivers=("ours", f"nvidia={chart}"),
        sets=("nvidia:resources.gpus.enabled=false", "nvidia:a=b=c", "ours:logVerbosity=4"),
        namespaces=("nvidia:nvidia-dra-driver-gpu",),
        image_maps=(f"nvcr.io/nvidia/k8s-dra-driver-gpu={image}",),
        ours=_ours(tmp_path),
    )
    assert nvidia == drivers.DriverSpec(
        name="nvidia",
        chart=chart,
        release="nvidia-dra-driver-gpu",
        namespace="nvidia-dra-driver-gpu",
        values=("resources.gpus.enabled=false", "a=b=c"),
        image_map=(("nvcr.io/nvidia/k8s-dra-driver-gpu", image),),
    )
    # Ours keeps its built-in value first; an image map without DRIVER: goes to every sim.
    assert ours.values == ("nvidiaDriverRoot=/run/nvidia/driver", "logVerbosity=4")
    assert ours.image_map == (("nvcr.io/nvidia/k8s-dra-driver-gpu", image),)
    assert ours.namespace == "compute-domains"


def test_our_own_chart_under_another_name_keeps_the_sim_values(tmp_path: Path) -> None:
    # Without the sims' driver root our plugins find no NVML and crash-loop until helm's
    # timeout (seen on the 16-core machine: five minutes of device time lost per round).
    own = tmp_path / "ours-chart"
    own.mkdir()
    (own / "Chart.yaml").write_text("name: compute-domains\n")
    _, resident = drivers.parse(
        drivers=("ours", f"resident={own}"),
        sets=("resident:imex.agents=resident", "resident:nvidiaDriverRoot=/elsewhere"),
        ours=_ours(tmp_path),
    )
    assert resident.values == (
        "nvidiaDriverRoot=/run/nvidia/driver",
        "imex.agents=resident",
        "nvidiaDriverRoot=/elsewhere",  # helm takes the last --set: the user's wins
    )
    assert (resident.release, resident.namespace) == ("ours-chart", "ours-chart")


def test_defaults_and_prefixes(tmp_path: Path, chart: Path, image: Path) -> None:
    _, other = drivers.parse(
        drivers=("ours", f"other={chart}"),
        releases=("other:rel",),
        image_maps=(f"other:localhost:5000/img={image}", f"localhost:5000/x={image}"),
        ours=_ours(tmp_path),
    )
    assert (other.release, other.namespace) == ("rel", "rel")  # namespace follows the release
    assert other.image_map == (("localhost:5000/img", image), ("localhost:5000/x", image))
    (ours,) = drivers.parse(
        drivers=(), image_maps=(f"localhost:5000/x={image}",), ours=_ours(tmp_path)
    )
    assert ours.image_map == (("localhost:5000/x", image),)  # a registry port is no driver


@pytest.mark.parametrize(
    ("kwargs", "option", "says"),
    [
        ({"drivers": ("ours=/x",)}, "--driver", "give another chart its own name"),
        ({"drivers": ("nvidia",)}, "--driver", "expected nvidia=CHART"),
        ({"drivers": ("Nvidia=CHART",)}, "--driver", "lowercase"),
        ({"drivers": ("ours", "ours")}, "--driver", "given twice"),
        ({"drivers": ("x=/nonexistent",)}, "--driver", "no Chart.yaml"),
        ({"drivers": (), "sets": ("a=b",)}, "--set", "expected DRIVER:"),
        ({"drivers": (), "sets": ("nvidia:a=b",)}, "--set", "no driver 'nvidia'"),
        ({"drivers": (), "sets": ("ours:novalue",)}, "--set", "DRIVER:KEY=VALUE"),
        ({"drivers": (), "namespaces": ("ours:Bad_NS",)}, "--namespace", "DNS label"),
        ({"drivers": (), "namespaces": ("ours:a", "ours:b")}, "--namespace", "given twice"),
        ({"drivers": (), "releases": ("x",)}, "--release", "expected DRIVER:"),
        ({"drivers": (), "image_maps": ("repo:tag=/tmp",)}, "--image-map", "no image tag"),
        ({"drivers": (), "image_maps": ("repo=/nonexistent",)}, "--image-map", "not a folder"),
    ],
)
def test_bad_options_name_the_option(
    tmp_path: Path, kwargs: dict[str, tuple[str, ...]], option: str, says: str
) -> None:
    with pytest.raises(drivers.DriverOptionError, match=says) as err:
        drivers.parse(**kwargs, ours=_ours(tmp_path))
    assert err.value.option == option


def test_plan_alternates_drivers_within_each_repeat(tmp_path: Path, chart: Path) -> None:
    specs = drivers.parse(drivers=("ours", f"nvidia={chart}"), ours=_ours(tmp_path))
    plan = drivers.plan(specs, 3)
    assert [(r.index, r.repeat, r.driver.name) for r in plan] == [
        (0, 0, "ours"),
        (1, 0, "nvidia"),
        (2, 1, "ours"),
        (3, 1, "nvidia"),
        (4, 2, "ours"),
        (5, 2, "nvidia"),
    ]
    assert drivers.plan(specs, 0) == []


def test_describe_is_plain_data(tmp_path: Path, image: Path) -> None:
    spec = drivers.DriverSpec(
        name="x", chart=tmp_path, release="r", namespace="n", image_map=(("repo", image),)
    )
    assert spec.describe() == {
        "name": "x",
        "chart": f"<{tmp_path.name} folder>",
        "release": "r",
        "namespace": "n",
        "values": [],
        "image_map": {"repo": f"<{image.name} folder>"},
    }


def test_result_files_keep_no_machine_paths(tmp_path: Path) -> None:
    chart = tmp_path / "deploy" / "helm" / "chart"
    chart.mkdir(parents=True)
    assert drivers.portable(chart, root=tmp_path) == "deploy/helm/chart"
    assert drivers.portable(tmp_path, root=chart) == f"<{tmp_path.name} folder>"
