"""``make chart``: the versioned archive a user pins, read back with tar and rendered by helm.

The expectations come from the chart folder itself (its ``Chart.yaml`` and ``crds/``), read here
independently of ``sim.chart_archive``; the archive is opened with ``tarfile`` and rendered by
the built helm with no ``--kube-version`` (the helm build stamps the Kubernetes version it
assumes, issue 27 point 4).
"""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from compute_domains.cli import main
from compute_domains.sim import chart_archive, errors, toolchain
from tests.unit.chart import render

META = yaml.safe_load((render.CHART / "Chart.yaml").read_text())
CRDS = {p.name: p.read_bytes() for p in (render.CHART / "crds").glob("*.yaml")}
ARCHIVE_NAME = f"{META['name']}-{META['version']}.tgz"


def _package(toolset: toolchain.Toolset, chart: Path, out: Path) -> chart_archive.ChartArchive:
    settings = chart_archive.ChartSettings(chart=chart, out=out)
    return chart_archive.package(settings, toolset.path("helm"))


def test_the_archive_is_named_and_versioned_as_chart_yaml_with_every_crd(
    toolset: toolchain.Toolset, tmp_path: Path
) -> None:
    assert len(CRDS) == 2, sorted(CRDS)  # ComputeDomain and ComputeDomainClique
    archive = _package(toolset, render.CHART, tmp_path)
    assert archive.path == tmp_path / ARCHIVE_NAME
    assert (archive.name, archive.version) == (META["name"], META["version"])
    assert archive.app_version == str(META["appVersion"])
    with tarfile.open(archive.path, "r:gz") as tar:
        packed_meta = yaml.safe_load(tar.extractfile(f"{META['name']}/Chart.yaml").read())  # type: ignore[union-attr]
        prefix = f"{META['name']}/crds/"
        packed = {
            m.name.removeprefix(prefix): tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.name.startswith(prefix)
        }
    assert (packed_meta["name"], packed_meta["version"]) == (META["name"], META["version"])
    assert packed == CRDS


def test_the_archive_renders_with_no_kube_version_and_carries_the_crds(
    toolset: toolchain.Toolset, tmp_path: Path
) -> None:
    archive = _package(toolset, render.CHART, tmp_path)
    done = render.helm(toolset, "template", "cd", str(archive.path), "-n", "cd", "--include-crds")
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    rendered_crds = {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"}
    want = {yaml.safe_load(text)["metadata"]["name"] for text in CRDS.values()}
    assert rendered_crds == want
    assert {d["kind"] for d in docs} >= {"Deployment", "DaemonSet", "DeviceClass"}


def test_the_built_helm_assumes_the_kubernetes_of_its_client_go(
    toolset: toolchain.Toolset, tmp_path: Path
) -> None:
    chart = tmp_path / "kv"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: kv\nversion: 0.1.0\n")
    (chart / "templates" / "cm.yaml").write_text("kube: {{ .Capabilities.KubeVersion.Version }}\n")
    done = render.helm(toolset, "template", str(chart))
    assert done.returncode == 0, done.stderr
    minor = toolchain.HELM_CLIENT_GO.split(".")[1]
    assert yaml.safe_load(done.stdout) == {"kube": f"v1.{minor}.0"}
    version = render.helm(toolset, "version", "--template", "{{.Version}} {{.GitCommit}}")
    assert version.stdout == f"{toolchain.HELM_VERSION} {toolchain.HELM_COMMIT}"


def _copy_chart(tmp_path: Path) -> Path:
    chart = tmp_path / "src" / "compute-domains"
    shutil.copytree(render.CHART, chart)
    return chart


def test_a_crd_left_out_of_the_archive_is_refused_and_no_archive_stays(
    toolset: toolchain.Toolset, tmp_path: Path
) -> None:
    chart = _copy_chart(tmp_path)
    dropped = sorted(CRDS)[0]
    (chart / ".helmignore").write_text(f"crds/{dropped}\n")
    out = tmp_path / "out"
    with pytest.raises(errors.SimError, match=f"lacks the CRDs {dropped} under crds/"):
        _package(toolset, chart, out)
    assert not (out / ARCHIVE_NAME).exists()


def test_a_chart_that_fails_lint_is_not_packaged(
    toolset: toolchain.Toolset, tmp_path: Path
) -> None:
    chart = _copy_chart(tmp_path)
    with (chart / "values.yaml").open("a") as fh:
        fh.write("noSuchKey: 1\n")
    out = tmp_path / "out"
    with pytest.raises(errors.SimError, match=r"helm lint .* failed") as err:
        _package(toolset, chart, out)
    assert "noSuchKey" in str(err.value)
    assert not (out / ARCHIVE_NAME).exists()


@pytest.mark.slow_unit(8, "finds the built tools by checksum, as every cdctl tools user does")
def test_cdctl_chart_package_prints_the_archive(tmp_path: Path) -> None:
    result = CliRunner().invoke(main.cli, ["chart", "package", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(tmp_path / ARCHIVE_NAME)
    assert (tmp_path / ARCHIVE_NAME).is_file()
