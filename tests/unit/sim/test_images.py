from pathlib import Path

import pytest

from compute_domains.sim import images

PROJECT = Path("/checkout/.venv/bin")
OLD = Path("/cache/releases/v0.1.0-abc/venv/bin")


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("ghcr.io/compute-domains/compute-domains:0.1.0", "0.1.0"),
        ("localhost:5000/compute-domains:0.2.0", "0.2.0"),
        ("localhost:5000/compute-domains", "latest"),
        ("compute-domains@sha256:abcd", "latest"),
        ("compute-domains:0.1.0@sha256:abcd", "0.1.0"),
    ],
)
def test_tag_of_an_image_reference(image: str, expected: str) -> None:
    assert images.tag(image) == expected


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("ghcr.io/compute-domains/compute-domains:0.1.0", OLD),  # a listed release
        ("ghcr.io/compute-domains/compute-domains:0.2.0", PROJECT),  # any other tag
        ("ghcr.io/compute-domains/compute-domains", PROJECT),
        ("ubuntu:0.1.0", PROJECT),  # the tag of another image selects nothing
    ],
)
def test_project_image_tag_selects_the_release_installation(image: str, expected: Path) -> None:
    registry = images.ImageRegistry(
        stand_in_bin=Path("/sim/bin"), project_bin=PROJECT, releases={"0.1.0": OLD}
    )
    assert registry.bin_dir(image) == expected
    env = registry.environment({"PATH": "/usr/bin"}, image)
    # The project's image holds no stand-ins (no nvidia-imex): only user images get them.
    lead = "" if registry.is_project(image) else "/sim/bin:"
    assert env["PATH"] == f"{lead}{expected}:/usr/bin"


def test_the_project_image_has_no_simulator_programs_on_its_path() -> None:
    registry = images.ImageRegistry(stand_in_bin=Path("/sim/bin"), project_bin=PROJECT)
    path = registry.environment({}, "ghcr.io/compute-domains/compute-domains:1.0")["PATH"]
    assert "/sim/bin" not in path.split(":")
    assert path.split(":")[0] == str(PROJECT)


def test_a_mapped_image_is_its_folder_and_runs_its_command_as_written() -> None:
    folder = Path("/images/nvidia")
    registry = images.ImageRegistry(
        stand_in_bin=Path("/sim/bin"),
        project_bin=PROJECT,
        image_map={"nvcr.io/nvidia/k8s-dra-driver-gpu": folder},
    )
    image = "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0"
    assert registry.image_root(image) == folder
    assert registry.image_root("ubuntu:22.04") is None
    assert registry.environment({"PATH": "/usr/bin"}, image)["PATH"] == "/usr/bin"
    argv = registry.command(image, ["compute-domain-controller"], ["-v", "4"])
    assert argv == ["compute-domain-controller", "-v", "4"]
