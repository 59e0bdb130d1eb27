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
    assert env["PATH"] == f"/sim/bin:{expected}:/usr/bin"
