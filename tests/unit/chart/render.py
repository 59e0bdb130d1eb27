"""Render the chart with the built ``helm`` (``helm template``/``helm lint``) for the chart tests.

The tests find helm the way every test does: through the ``toolset`` fixture, which `make test`
builds first. Rendering needs no cluster: ``--kube-version`` stands for the cluster's version and
``--api-versions`` adds to the API versions helm assumes are served.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Any

import yaml

from compute_domains.sim import toolchain

CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "compute-domains"


@dataclasses.dataclass(frozen=True)
class Rendered:
    """The objects of one rendering, with lookups by kind and name."""

    docs: list[dict[str, Any]]

    def all(self, kind: str) -> list[dict[str, Any]]:
        """Every object of ``kind``."""
        return [d for d in self.docs if d.get("kind") == kind]

    def one(self, kind: str) -> dict[str, Any]:
        """The only object of ``kind``."""
        (found,) = self.all(kind)
        return found

    def named(self, kind: str, name: str) -> dict[str, Any]:
        """The object of ``kind`` called ``name``."""
        (found,) = [d for d in self.all(kind) if d["metadata"]["name"] == name]
        return found

    def pod(self, kind: str) -> dict[str, Any]:
        """The pod template spec of the only ``kind`` (Deployment or DaemonSet)."""
        spec: dict[str, Any] = self.one(kind)["spec"]["template"]["spec"]
        return spec

    def pod_labels(self, kind: str) -> dict[str, str]:
        """The pod template labels of the only ``kind``."""
        labels: dict[str, str] = self.one(kind)["spec"]["template"]["metadata"]["labels"]
        return labels

    def env(self, kind: str) -> dict[str, Any]:
        """The first container's env of the only ``kind``: name → value (or valueFrom)."""
        entries = self.pod(kind)["containers"][0]["env"]
        names = [e["name"] for e in entries]
        assert len(names) == len(set(names)), f"duplicate env names: {names}"
        return {e["name"]: e.get("value", e.get("valueFrom")) for e in entries}


def helm(
    toolset: toolchain.Toolset,
    *args: str,
    values: dict[str, Any] | None = None,
    tmp: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the built helm with ``args`` (and a values file made from ``values``)."""
    argv = [str(toolset.path("helm")), *args]
    if values is not None:
        assert tmp is not None, "a values file needs a folder"
        path = tmp / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        argv += ["-f", str(path)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def template_args(*sets: str, namespace: str = "cd", kube: str = "1.34.0") -> list[str]:
    """``helm template`` arguments for release ``cd`` with ``--set`` values."""
    argv = ["template", "cd", str(CHART), "--namespace", namespace, "--kube-version", kube]
    for value in sets:
        argv += ["--set", value]
    return argv


def render(
    toolset: toolchain.Toolset,
    *sets: str,
    namespace: str = "cd",
    kube: str = "1.34.0",
    extra: tuple[str, ...] = (),
    values: dict[str, Any] | None = None,
    tmp: Path | None = None,
) -> Rendered:
    """The chart's objects; a failed rendering fails the test with helm's message."""
    done = helm(
        toolset,
        *template_args(*sets, namespace=namespace, kube=kube),
        *extra,
        values=values,
        tmp=tmp,
    )
    assert done.returncode == 0, done.stderr
    return Rendered([d for d in yaml.safe_load_all(done.stdout) if d])


def refusal(
    toolset: toolchain.Toolset, *sets: str, namespace: str = "cd", kube: str = "1.34.0"
) -> str:
    """helm's error for a rendering that must fail (the test fails if it renders)."""
    done = helm(toolset, *template_args(*sets, namespace=namespace, kube=kube))
    assert done.returncode != 0, f"rendered, but should have been refused: {sets}"
    return " ".join(done.stderr.split())
