import subprocess
from pathlib import Path

import pytest

from compute_domains.sim import errors, releases


def test_installed_lists_offered_releases_by_image_tag(tmp_path: Path) -> None:
    venv = tmp_path / "cache" / "v0.1.0-abc" / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "cdctl").write_text("#!/bin/sh\n")
    (tmp_path / "cache" / "empty" / "bin").mkdir(parents=True)  # no cdctl: not a release
    offered = tmp_path / "home" / "releases"
    offered.mkdir(parents=True)
    (offered / "0.1.0").symlink_to(venv)
    (offered / "0.0.9").symlink_to(tmp_path / "cache" / "empty")
    assert releases.installed(offered) == {"0.1.0": (venv / "bin").resolve()}
    assert releases.installed(tmp_path / "missing") == {}


def _repo(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "f").write_text("x\n")
    subprocess.run(["git", "-C", str(path), "add", "f"], check=True)
    subprocess.run(
        ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"],
        check=True,
    )
    subprocess.run(
        [
            "git",
            "-C",
            str(path),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "tag",
            "-a",
            "v9.9.9",
            "-m",
            "r",
        ],
        check=True,
    )
    return path


def test_resolve_names_the_commit_of_an_annotated_tag_or_a_hash(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert releases.resolve(repo, "v9.9.9") == head
    assert releases.resolve(repo, head) == head
    assert releases.resolve(repo, head[:12]) == head


def test_a_missing_tag_says_how_to_get_it(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    with pytest.raises(errors.SimError, match=r"git tag v0\.1\.0 is not in .*git fetch --tags"):
        releases.resolve(repo, "v0.1.0")


def test_a_missing_commit_says_how_to_get_it(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    with pytest.raises(errors.SimError, match=r"commit 457bc7e9 is not in .*--unshallow"):
        releases.resolve(repo, "457bc7e9")


def _tree(root: Path) -> Path:
    chart = root / releases.CHART_PATH
    chart.mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        'apiVersion: v2\nname: compute-domains\nversion: 0.2.0\nappVersion: "0.2.0"\n'
    )
    (root / "src/compute_domains").mkdir(parents=True)
    (root / "src/compute_domains/__init__.py").write_text('"""doc"""\n\n__version__ = "0.2.0"\n')
    (root / "pyproject.toml").write_text('[project]\nname = "compute-domains"\nversion = "0.2.0"\n')
    return root


def test_stamp_writes_one_version_into_package_and_chart(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    releases.stamp(root, "0.2.0-dev.1")
    chart = (root / releases.CHART_PATH / "Chart.yaml").read_text()
    assert 'version: 0.2.0-dev.1\nappVersion: "0.2.0-dev.1"\n' in chart
    assert '__version__ = "0.2.0-dev.1"' in (root / "src/compute_domains/__init__.py").read_text()
    assert 'version = "0.2.0-dev.1"' in (root / "pyproject.toml").read_text()


def test_stamp_refuses_a_tree_without_the_version_line(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "pyproject.toml").write_text('[project]\nname = "compute-domains"\n')
    with pytest.raises(errors.SimError, match=r"cannot stamp pyproject\.toml"):
        releases.stamp(root, "0.2.0-dev.1")


def test_link_offers_a_release_under_its_image_tag(tmp_path: Path) -> None:
    root = tmp_path / "cache" / "v0.1.0-abc"
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / "cdctl").write_text("#!/bin/sh\n")
    rel = releases.Release(ref="v0.1.0", commit="abc", version="0.1.0", root=root)
    home = tmp_path / "home"
    releases.link(rel, home)
    releases.link(rel, home)  # again: replaces the link
    assert releases.installed(home / "releases") == {"0.1.0": rel.bin_dir.resolve()}
