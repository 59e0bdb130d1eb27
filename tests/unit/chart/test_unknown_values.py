"""A value key the chart does not know is refused at install, naming the key and where it is.

``values.schema.json`` closes every object level (``additionalProperties: false``) except the
maps that are free-form by nature (labels, annotations, node selectors, affinities, resources,
security contexts, update strategies) and NVIDIA's keys that are accepted and unused here, so a
typo at any depth fails ``helm template``/``install``/``lint`` before anything renders
(docs/decisions/0017-unknown-values-refused.md). Every key of values.yaml and of NVIDIA's
v25.12.0 chart is declared; the sim's and the e2e tests' installs render unchanged.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from compute_domains.sim import toolchain
from tests.unit.chart import nvidia_values, render

SCHEMA: dict[str, Any] = json.loads((render.CHART / "values.schema.json").read_text())
VALUES: dict[str, Any] = yaml.safe_load((render.CHART / "values.yaml").read_text())

FREE_FORM = {
    "global",
    "selectorLabelsOverride",
    "serviceAccount.annotations",
    "featureGates",  # every gate name is checked by templates/validation.yaml, with the known list
    "controller.resources",
    "controller.podAnnotations",
    "controller.podSecurityContext",
    "controller.nodeSelector",
    "controller.tolerations[]",
    "controller.affinity",
    "controller.containers.computeDomain.securityContext",
    "controller.containers.computeDomain.env[]",
    "controller.containers.computeDomain.resources",
    "imex.agent.updateStrategy",
    "imex.agent.nodeSelector",
    "imex.agent.affinity",
    "kubeletPlugin.resources",
    "kubeletPlugin.updateStrategy",
    "kubeletPlugin.podAnnotations",
    "kubeletPlugin.podSecurityContext",
    "kubeletPlugin.nodeSelector",
    "kubeletPlugin.tolerations[]",
    "kubeletPlugin.affinity",
    "kubeletPlugin.containers.init.securityContext",
    "kubeletPlugin.containers.init.resources",
    "kubeletPlugin.containers.computeDomains.env[]",
    "kubeletPlugin.containers.computeDomains.securityContext",
    "kubeletPlugin.containers.computeDomains.resources",
}
"""The schema's open maps: Kubernetes objects or user maps passed through as they are."""

UNUSED_ANY = ("maskNvidiaDriverParams", "webhook.", "kubeletPlugin.containers.gpus.")
"""NVIDIA's keys accepted and unused here, with any value (NVIDIA's chart has no schema)."""

NOT_MAPS = {"string", "integer", "number", "boolean", "null", "array"}


def _open_nodes(node: dict[str, Any], path: str = "") -> list[str]:
    """Dotted paths of every schema node that takes keys it does not declare."""
    found: list[str] = []
    types = node.get("type", [])
    types = {types} if isinstance(types, str) else set(types)
    if "properties" in node:
        for key, child in node["properties"].items():
            found += _open_nodes(child, f"{path}.{key}" if path else key)
        if node.get("additionalProperties") is not False:
            found.append(path)
    elif "items" in node:
        found += _open_nodes(node["items"], f"{path}[]")
    elif not types or not types <= NOT_MAPS:  # an object, or a value of any type
        found.append(path)
    return found


def _lookup(path: list[str]) -> dict[str, Any] | None:
    """The schema node of a key path; None where a closed level does not declare the key."""
    node = SCHEMA
    for part in path:
        if "properties" not in node:
            return node  # a free-form map: anything below is its content
        if part not in node["properties"]:
            return None
        node = node["properties"][part]
    return node


def _value_paths(values: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[list[str]]:
    out: list[list[str]] = []
    for key, value in values.items():
        out.append([*prefix, key])
        if isinstance(value, dict):
            out += _value_paths(value, (*prefix, key))
    return out


def test_every_key_in_values_yaml_is_declared_in_the_schema() -> None:
    undeclared = [".".join(p) for p in _value_paths(VALUES) if _lookup(p) is None]
    assert undeclared == [], f"add these values.yaml keys to values.schema.json: {undeclared}"


def test_every_object_level_is_closed_but_the_free_form_maps() -> None:
    open_nodes = {p for p in _open_nodes(SCHEMA) if not p.startswith(UNUSED_ANY)}
    assert open_nodes == FREE_FORM


@pytest.mark.parametrize(
    ("sets", "where", "key"),
    [
        (("noSuchKey.atAll=1",), "''", "noSuchKey"),
        (("controller.noSuch=1",), "'/controller'", "noSuch"),
        (("controller.replica=1",), "'/controller'", "replica"),
        (("imex.agnets=resident",), "'/imex'", "agnets"),
        (("imex.agent.noSuch=1",), "'/imex/agent'", "noSuch"),
        (("imex.agent.resources.gpu=1",), "'/imex/agent/resources'", "gpu"),
        (("daemon.priorityClass.preemption=Never",), "'/daemon/priorityClass'", "preemption"),
        (("resources.gpus.enable=false",), "'/resources/gpus'", "enable"),
        (("image.tags=1",), "'/image'", "tags"),
        (("imagePullSecrets[0].nam=regcred",), "'/imagePullSecrets/0'", "nam"),
        (("compat.nvidiaName=true",), "'/compat'", "nvidiaName"),
        (("kubeletPlugin.networkPolicy.enable=true",), "'/kubeletPlugin/networkPolicy'", "enable"),
        (
            ("kubeletPlugin.containers.computeDomains.livenessProbe.initialDelaySeconds=5",),
            "'/kubeletPlugin/containers/computeDomains/livenessProbe'",
            "initialDelaySeconds",
        ),
        (
            ("kubeletPlugin.containers.plugin.healthcheckPort=1",),
            "'/kubeletPlugin/containers'",
            "plugin",
        ),
        (
            ("controller.containers.computeDomains.resources.limits.cpu=1",),
            "'/controller/containers'",
            "computeDomains",
        ),
        (("webhook.tls.certManger.issuerType=ca",), "'/webhook/tls'", "certManger"),
    ],
)
def test_an_unknown_key_is_refused_naming_it_and_its_level(
    toolset: toolchain.Toolset, sets: tuple[str, ...], where: str, key: str
) -> None:
    message = render.refusal(toolset, *sets)
    assert "values don't meet the specifications of the schema" in message, message
    assert f"- at {where}: additional properties '{key}' not allowed" in message, message


def test_every_unknown_key_is_named_at_once(toolset: toolchain.Toolset) -> None:
    message = render.refusal(toolset, "imex.agnets=resident", "controller.noSuch=1", "typo=1")
    for level, key in (("'/imex'", "agnets"), ("'/controller'", "noSuch"), ("''", "typo")):
        assert f"- at {level}: additional properties '{key}' not allowed" in message, message


def test_helm_lint_names_the_unknown_key(toolset: toolchain.Toolset) -> None:
    lint = ["lint", str(render.CHART), "-n", "cd", "--kube-version", "1.34.0"]
    done = render.helm(toolset, *lint, "--set", "controller.replica=1")
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "at '/controller': additional properties 'replica' not allowed" in out, out


def test_free_form_maps_take_any_key(toolset: toolchain.Toolset) -> None:
    r = render.render(
        toolset,
        "selectorLabelsOverride.team=gpu",
        "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn",
        "controller.podAnnotations.any\\.thing/x=y",
        "controller.resources.limits.cpu=1",
        "controller.podSecurityContext.fsGroup=2000",
        "controller.nodeSelector.pool=a",
        "controller.tolerations[0].tolerationSeconds=30",
        "controller.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        ".topologyKey=kubernetes.io/hostname",
        "controller.containers.computeDomain.env[0].name=POD_IP",
        "controller.containers.computeDomain.env[0].valueFrom.fieldRef.fieldPath=status.podIP",
        "controller.containers.computeDomain.securityContext.capabilities.drop[0]=ALL",
        "kubeletPlugin.updateStrategy.rollingUpdate.maxSurge=0",
        "kubeletPlugin.podSecurityContext.seccompProfile.type=RuntimeDefault",
        "kubeletPlugin.containers.computeDomains.resources.requests.memory=64Mi",
        "imex.agent.updateStrategy.rollingUpdate.maxUnavailable=1",
        "imex.agent.nodeSelector.pool=a",
        "global.imageRegistry=registry.example",
    )
    assert r.pod("Deployment")["nodeSelector"] == {"pool": "a"}
    assert r.pod("Deployment")["securityContext"] == {"fsGroup": 2000}


def test_nvidias_keys_keep_their_handling(toolset: toolchain.Toolset, tmp_path: Path) -> None:
    # NVIDIA's whole values file (webhook and GPU container keys included), and the keys its
    # templates read undocumented, render as NVIDIA's chart takes them with GPUs off.
    values = nvidia_values.defaults()
    values["resources"]["gpus"]["enabled"] = False
    values["webhook"]["serviceAccount"]["annotations"] = {"team": "gpu"}
    values["maskNvidiaDriverParams"] = True
    assert render.render(toolset, values=values, tmp=tmp_path).one("Deployment")
    # The two undocumented keys NVIDIA's chart refuses keep the template's reason.
    assert "use helm's --namespace" in render.refusal(toolset, "namespace=x")
    assert "no CDI hooks" in render.refusal(toolset, "nvidiaCtkPath=/usr/bin/nvidia-ctk")


def test_the_chart_installs_as_an_umbrella_charts_dependency(
    toolset: toolchain.Toolset, tmp_path: Path
) -> None:
    # An umbrella chart passes its globals and its `condition` key down: both are declared.
    umbrella = tmp_path / "platform"
    shutil.copytree(render.CHART, umbrella / "charts" / "compute-domains")
    dependency = {"name": "compute-domains", "version": "*", "condition": "compute-domains.enabled"}
    chart = {"apiVersion": "v2", "name": "platform", "version": "0.1.0"}
    (umbrella / "Chart.yaml").write_text(yaml.safe_dump({**chart, "dependencies": [dependency]}))
    (umbrella / "values.yaml").write_text(
        yaml.safe_dump({"global": {"imageRegistry": "r"}, "compute-domains": {"enabled": True}})
    )
    argv = ["template", "cd", str(umbrella), "-n", "cd", "--kube-version", "1.34.0"]
    done = render.helm(toolset, *argv)
    assert done.returncode == 0, done.stderr
    typo = render.helm(toolset, *argv, "--set", "compute-domains.imex.agnets=resident")
    assert "at '/imex': additional properties 'agnets' not allowed" in typo.stderr, typo.stderr
