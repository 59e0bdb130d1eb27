"""The driver's container image (scripts/build-image.sh, docs/image.md).

Builds the image (or reuses a build of the same inputs), checks the OCI layout blob by blob,
checks the config the chart relies on, then unpacks it with umoci and runs the chart's commands
in its root filesystem under chroot, with exactly the image's environment.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from compute_domains.sim import images

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]  # a cold build takes ~6 min

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "build-image.sh"
LAYOUT = REPO / "build" / "image"
CHART = REPO / "deploy" / "helm" / "compute-domains"
VENV_BIN = "/opt/compute-domains/bin"


def _version() -> str:
    with (REPO / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


@dataclasses.dataclass(frozen=True)
class Image:
    version: str
    umoci: str
    manifest: dict[str, Any]
    config: dict[str, Any]


def _blob(digest: str) -> Path:
    algo, _, hexdigest = digest.partition(":")
    assert algo == "sha256", digest
    return LAYOUT / "blobs" / "sha256" / hexdigest


def _json_blob(descriptor: dict[str, Any]) -> dict[str, Any]:
    data = _blob(descriptor["digest"]).read_bytes()
    assert len(data) == descriptor["size"], descriptor
    assert "sha256:" + hashlib.sha256(data).hexdigest() == descriptor["digest"]
    out: dict[str, Any] = json.loads(data)
    return out


@pytest.fixture(scope="module")
def image() -> Image:
    if os.geteuid() != 0:
        pytest.skip("building and chrooting into the image needs root")
    # Builds, or says "up to date" when build/image was made from the same inputs.
    subprocess.run([str(SCRIPT)], check=True, timeout=1700)
    umoci = subprocess.run(
        [str(SCRIPT), "--umoci-path"], check=True, text=True, capture_output=True
    ).stdout.strip()
    version = _version()
    index = json.loads((LAYOUT / "index.json").read_text())
    assert index["schemaVersion"] == 2
    refs = {m["annotations"]["org.opencontainers.image.ref.name"]: m for m in index["manifests"]}
    assert list(refs) == [version], f"tags in the layout: {list(refs)}"
    manifest = _json_blob(refs[version])
    return Image(version, umoci, manifest, _json_blob(manifest["config"]))


@pytest.fixture(scope="module")
def rootfs(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    bundle = tmp_path_factory.mktemp("image") / "bundle"
    subprocess.run(
        [image.umoci, "unpack", "--image", f"{LAYOUT}:{image.version}", str(bundle)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    yield bundle / "rootfs"
    shutil.rmtree(bundle, ignore_errors=True)


def _run(image: Image, rootfs: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ARGV in the image's root the way a runtime would: only the config's environment."""
    env = dict(e.split("=", 1) for e in image.config["config"]["Env"])
    chroot = shutil.which("chroot")
    assert chroot is not None
    return subprocess.run(
        [chroot, str(rootfs), *argv], env=env, text=True, capture_output=True, timeout=120
    )


def test_layout_is_a_valid_oci_image(image: Image) -> None:
    assert json.loads((LAYOUT / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    assert image.manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert image.manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    layers = image.manifest["layers"]
    assert len(layers) == 2  # Debian + python3, then the venv
    diff_ids = []
    for layer in layers:
        assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
        path = _blob(layer["digest"])
        assert path.stat().st_size == layer["size"]
        packed, unpacked = hashlib.sha256(), hashlib.sha256()
        with path.open("rb") as raw:
            while chunk := raw.read(1 << 20):
                packed.update(chunk)
        with gzip.open(path, "rb") as tar:
            while chunk := tar.read(1 << 20):
                unpacked.update(chunk)
        assert "sha256:" + packed.hexdigest() == layer["digest"]
        diff_ids.append("sha256:" + unpacked.hexdigest())
    assert image.config["rootfs"] == {"type": "layers", "diff_ids": diff_ids}
    stat = subprocess.run(
        [image.umoci, "stat", "--json", "--image", f"{LAYOUT}:{image.version}"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert len(json.loads(stat.stdout)["history"]) == 2


def test_config_runs_cdctl_with_version_labels(image: Image) -> None:
    cfg = image.config
    assert (cfg["os"], cfg["architecture"]) == ("linux", "amd64")
    assert cfg["config"]["Entrypoint"] == ["cdctl"]
    assert cfg["config"]["Cmd"] == ["--help"]
    env = dict(e.split("=", 1) for e in cfg["config"]["Env"])
    assert env["PATH"].split(":")[0] == VENV_BIN
    assert env["PYTHONUNBUFFERED"] == "1"
    labels = cfg["config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == image.version
    assert labels["org.opencontainers.image.title"] == "compute-domains"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert image.manifest["annotations"]["org.opencontainers.image.version"] == image.version


def test_chart_deploys_this_image(image: Image) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    tag = values["image"]["tag"] or chart["appVersion"]
    reference = f"{values['image']['repository']}:{tag}"
    assert tag == image.version, f"chart deploys {reference}, the image is {image.version}"
    assert images.ImageRegistry().is_project(reference)  # the simulator runs it as ours


def test_rootfs_runs_the_chart_commands(image: Image, rootfs: Path) -> None:
    assert not any((rootfs / "dev").iterdir()), "device nodes belong to the runtime"
    default = _run(
        image, rootfs, *image.config["config"]["Entrypoint"], *image.config["config"]["Cmd"]
    )
    assert default.returncode == 0, default.stderr
    assert "Usage: cdctl" in default.stdout
    version = _run(image, rootfs, "cdctl", "--version")
    assert version.stdout.strip() == f"cdctl, version {image.version}", version
    for command in (
        ["controller", "run"],
        ["plugin", "run"],
        ["daemon", "run"],
        ["daemon", "check"],
    ):
        out = _run(image, rootfs, "cdctl", *command, "--help")
        assert out.returncode == 0, (command, out.stderr)
        assert "usage:" in out.stdout.lower(), (command, out.stdout)
    imports = _run(
        image,
        rootfs,
        "python",
        "-c",
        "import compute_domains.cli.controller, compute_domains.cli.plugin, "
        "compute_domains.cli.daemon, compute_domains.daemon.app, pynvml, yaml",
    )
    assert imports.returncode == 0, imports.stderr


@pytest.mark.parametrize("python", ["python3", f"{VENV_BIN}/python"])
def test_python_is_3_11(image: Image, rootfs: Path, python: str) -> None:
    out = _run(image, rootfs, python, "-c", "import sys; print(*sys.version_info[:2])")
    assert out.stdout.split() == ["3", "11"], out
