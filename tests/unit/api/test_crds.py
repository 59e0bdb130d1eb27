"""CRD manifests: committed files are current, schemas match the models, our additions exist."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from hypothesis import given, settings
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

from compute_domains.api import crds, names
from compute_domains.api.clique import ComputeDomainClique
from compute_domains.api.computedomain import ComputeDomain

from . import strategies

CHART_CRDS = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "compute-domains" / "crds"
EXPECTED_FILES = {
    "resource.nvidia.com_computedomains.yaml",
    "resource.nvidia.com_computedomaincliques.yaml",
}


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
}


def _conform(value: Any, schema: dict[str, Any], path: str = "") -> None:
    """A small structural-schema check: types, required, enums, bounds, unknown fields."""
    kind = schema.get("type")
    if kind is not None:
        assert isinstance(value, _TYPES[kind]) and not isinstance(value, bool), path
    if "enum" in schema:
        assert value in schema["enum"], path
    if "minimum" in schema:
        assert value >= schema["minimum"], path
    if "maxLength" in schema:
        assert len(value) <= schema["maxLength"], path
    if "pattern" in schema:
        assert re.search(schema["pattern"], value), path
    if kind == "object" and "properties" in schema:
        for key in schema.get("required", []):
            assert key in value, f"{path}.{key} required"
        for key, item in value.items():
            assert key in schema["properties"], f"{path}.{key} not in schema"
            _conform(item, schema["properties"][key], f"{path}.{key}")
    if kind == "array":
        for i, item in enumerate(value):
            _conform(item, schema["items"], f"{path}[{i}]")
        keys = schema.get("x-kubernetes-list-map-keys")
        if keys:
            seen = [tuple(item[k] for k in keys) for item in value]
            assert len(seen) == len(set(seen)), f"{path} list-map keys unique"


def test_committed_manifests_are_current() -> None:
    """Fails when crds.py changed without `python -m compute_domains.api.crds <chart>/crds`."""
    assert {p.name for p in CHART_CRDS.glob("*.yaml")} == EXPECTED_FILES
    assert crds.stale_files(CHART_CRDS) == []
    for filename, manifest in crds.manifests().items():
        assert yaml.safe_load((CHART_CRDS / filename).read_text()) == manifest


def test_main_writes_and_checks(tmp_path: Path) -> None:
    assert crds.main([str(tmp_path), "--check"]) == 1
    assert crds.main([str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == EXPECTED_FILES
    assert crds.main([str(tmp_path), "--check"]) == 0
    (tmp_path / "resource.nvidia.com_computedomains.yaml").write_text("# edited\n")
    assert crds.main([str(tmp_path), "--check"]) == 1


@pytest.mark.parametrize(
    ("crd", "kind", "plural"),
    [
        (crds.computedomain_crd(), "ComputeDomain", "computedomains"),
        (crds.clique_crd(), "ComputeDomainClique", "computedomaincliques"),
    ],
    ids=["computedomain", "clique"],
)
def test_both_crds_are_namespaced_v1beta1_in_our_group(
    crd: dict[str, Any], kind: str, plural: str
) -> None:
    typed = cast(CustomResourceDefinition, CustomResourceDefinition.from_dict(crd))
    assert typed.metadata is not None and typed.metadata.name == f"{plural}.resource.nvidia.com"
    assert (typed.spec.group, typed.spec.scope, typed.spec.names.kind) == (
        names.GROUP,
        "Namespaced",
        kind,
    )
    assert [(v.name, v.served, v.storage) for v in typed.spec.versions] == [("v1beta1", True, True)]


def test_only_computedomain_has_a_status_subresource() -> None:
    assert crds.computedomain_crd()["spec"]["versions"][0]["subresources"] == {"status": {}}
    assert "subresources" not in crds.clique_crd()["spec"]["versions"][0]


def test_spec_is_required_and_immutable() -> None:
    schema = _schema(crds.computedomain_crd())
    assert schema["required"] == ["spec"]
    assert schema["properties"]["spec"]["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "A computeDomain.spec is immutable"}
    ]


def test_upstream_defaults_and_enums_are_kept() -> None:
    spec = _schema(crds.computedomain_crd())["properties"]["spec"]
    assert spec["properties"]["numNodes"] | {"description": ""} == {
        "description": "",
        "type": "integer",
        "default": 0,
        "minimum": 0,
    }
    mode = spec["properties"]["channel"]["properties"]["allocationMode"]
    assert (mode["default"], mode["enum"]) == ("Single", ["All", "Single"])
    status = _schema(crds.computedomain_crd())["properties"]["status"]
    assert status["required"] == ["status"]
    assert status["properties"]["status"]["enum"] == ["Ready", "NotReady"]
    assert status["properties"]["nodes"]["x-kubernetes-list-map-keys"] == ["name"]


def test_template_name_pattern_is_the_dns_subdomain_rule() -> None:
    spec = _schema(crds.computedomain_crd())["properties"]["spec"]
    name = spec["properties"]["channel"]["properties"]["resourceClaimTemplate"]["properties"][
        "name"
    ]
    assert name["pattern"] == f"^{names.DNS_SUBDOMAIN_REGEX}$"
    assert name["maxLength"] == 253


def test_printer_columns_show_status_ready_nodes_and_age() -> None:
    columns = crds.computedomain_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"], c["jsonPath"]) for c in columns if c.get("priority", 0) == 0] == [
        ("Status", ".status.status"),
        ("Ready", ".status.readyNodes"),
        ("Nodes", ".status.totalNodes"),
        ("Reason", '.status.conditions[?(@.type=="Ready")].reason'),
        ("Age", ".metadata.creationTimestamp"),
    ]
    schema = _schema(crds.computedomain_crd())
    for column in columns:
        node = schema
        # A filter (``[?(@.type=="Ready")]``) selects list items: step into ``items``.
        path = re.sub(r"\[\?\(@\.[^]]*\)\]", "[]", column["jsonPath"])
        for part in path.lstrip(".").split("."):
            if node.get("type") == "object" and "properties" not in node:
                break  # metadata: schema-less, known to the API server
            node = node["properties"][part.removesuffix("[]")]
            if part.endswith("[]"):
                node = node["items"]


@settings(max_examples=60, deadline=None)
@given(strategies.computedomains)
def test_every_computedomain_the_model_writes_fits_the_schema(cd: ComputeDomain) -> None:
    _conform(json.loads(json.dumps(cd.to_dict())), _schema(crds.computedomain_crd()))


@settings(max_examples=60, deadline=None)
@given(strategies.cliques)
def test_every_clique_the_model_writes_fits_the_schema(clique: ComputeDomainClique) -> None:
    _conform(json.loads(json.dumps(clique.to_dict())), _schema(crds.clique_crd()))
