"""ComputeDomain models: wire names, defaults, derived counters, errors, round-trips."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from lightkube.core.resource import NamespacedResource, api_info
from lightkube.models.meta_v1 import ObjectMeta

from compute_domains.api import names
from compute_domains.api.computedomain import (
    AllocationMode,
    ComputeDomain,
    ComputeDomainNode,
    ComputeDomainResource,
    ComputeDomainSpec,
    ComputeDomainStatus,
    ComputeDomainStatusResource,
    DecodeError,
    Readiness,
)
from compute_domains.infra.errors import PermanentError

from . import strategies


def _cd(**overrides: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "compute-domain-0", "namespace": "default", "uid": "uid-1"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "compute-domain-0-channel"}}},
    }
    obj.update(overrides)
    return obj


def _node(name: str, status: Readiness, index: int = 0) -> ComputeDomainNode:
    return ComputeDomainNode(
        name=name, ip_address="10.0.0.1", clique_id="c.1", index=index, status=status
    )


def test_a_minimal_spec_gets_upstream_defaults() -> None:
    cd = ComputeDomain.from_dict(_cd())
    assert cd.spec.num_nodes == 0
    assert cd.spec.channel.allocation_mode is AllocationMode.SINGLE
    assert cd.spec.channel.resource_claim_template.name == "compute-domain-0-channel"
    assert cd.status is None
    assert (cd.name, cd.namespace, cd.uid) == ("compute-domain-0", "default", "uid-1")


def test_wire_form_uses_exact_camel_case_names() -> None:
    cd = ComputeDomain.from_dict(
        _cd(
            spec={
                "numNodes": 2,
                "channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "All"},
            },
            status={
                "status": "Ready",
                "nodes": [
                    {
                        "name": "n1",
                        "ipAddress": "10.0.0.1",
                        "cliqueID": "c.1",
                        "index": 0,
                        "status": "Ready",
                    },
                    {
                        "name": "n2",
                        "ipAddress": "10.0.0.2",
                        "cliqueID": "",
                        "index": -1,
                        "status": "NotReady",
                    },
                ],
            },
        )
    )
    assert cd.to_dict() == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "compute-domain-0", "namespace": "default", "uid": "uid-1"},
        "spec": {
            "numNodes": 2,
            "channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "All"},
        },
        "status": {
            "status": "Ready",
            "nodes": [
                {
                    "name": "n1",
                    "ipAddress": "10.0.0.1",
                    "cliqueID": "c.1",
                    "index": 0,
                    "status": "Ready",
                },
                {
                    "name": "n2",
                    "ipAddress": "10.0.0.2",
                    "cliqueID": "",
                    "index": -1,
                    "status": "NotReady",
                },
            ],
            "readyNodes": 1,
            "totalNodes": 2,
        },
    }


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"status": "Ready"}, ComputeDomainStatus(status=Readiness.READY)),
        ({"status": ""}, ComputeDomainStatus(status=Readiness.NOT_READY)),
        ({}, ComputeDomainStatus(status=Readiness.NOT_READY)),
        ({"status": "Ready", "nodes": None}, ComputeDomainStatus(status=Readiness.READY)),
        (
            {"status": "NotReady", "nodes": [{"name": "n", "ipAddress": "ip", "cliqueID": ""}]},
            ComputeDomainStatus(
                nodes=(ComputeDomainNode(name="n", ip_address="ip", clique_id=""),)
            ),
        ),
        (
            {"status": "Ready", "readyNodes": 99, "totalNodes": 99},
            ComputeDomainStatus(status=Readiness.READY),
        ),
    ],
    ids=[
        "ready",
        "empty-is-notready",
        "absent-is-notready",
        "null-nodes",
        "node-defaults",
        "counters-ignored",
    ],
)
def test_status_decoding_applies_defaults(
    raw: dict[str, Any], expected: ComputeDomainStatus
) -> None:
    assert ComputeDomainStatus.from_dict(raw) == expected


def test_empty_node_list_is_omitted_but_counters_are_written() -> None:
    assert ComputeDomainStatus().to_dict() == {
        "status": "NotReady",
        "readyNodes": 0,
        "totalNodes": 0,
    }


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({k: v for k, v in _cd().items() if k != "spec"}, "spec: required field missing"),
        (_cd(spec={}), "spec.channel: required field missing"),
        (_cd(spec={"channel": {}}), "spec.channel.resourceClaimTemplate: required field missing"),
        (
            _cd(spec={"channel": {"resourceClaimTemplate": {"name": 3}}}),
            "spec.channel.resourceClaimTemplate.name: expected string, got integer",
        ),
        (
            _cd(spec={"numNodes": True, "channel": {"resourceClaimTemplate": {"name": "a"}}}),
            "spec.numNodes: expected integer, got boolean",
        ),
        (
            _cd(spec={"numNodes": 1.0, "channel": {"resourceClaimTemplate": {"name": "a"}}}),
            "spec.numNodes: expected integer, got number",
        ),
        (
            _cd(spec={"channel": {"resourceClaimTemplate": {"name": "a"}, "allocationMode": "x"}}),
            'spec.channel.allocationMode: unsupported value "x"',
        ),
        (_cd(spec=[]), "spec: expected object, got array"),
        (
            _cd(status={"status": "Ready", "nodes": [{"name": "n", "ipAddress": "i"}]}),
            "status.nodes[0].cliqueID: required field missing",
        ),
        (_cd(status={"nodes": ["n"]}), "status.nodes[0]: expected object, got string"),
        (_cd(kind="ComputeDomainClique"), 'expected kind "ComputeDomain"'),
        (
            _cd(apiVersion="resource.nvidia.com/v1"),
            'unsupported apiVersion "resource.nvidia.com/v1"',
        ),
        (_cd(metadata={"name": 5}), "metadata:"),
    ],
    ids=[
        "no-spec",
        "no-channel",
        "no-template",
        "name-not-string",
        "bool-num-nodes",
        "float-num-nodes",
        "unknown-mode",
        "spec-not-object",
        "node-missing-clique",
        "node-not-object",
        "wrong-kind",
        "wrong-api-version",
        "bad-metadata",
    ],
)
def test_malformed_objects_fail_permanently_naming_the_field(
    obj: dict[str, Any], message: str
) -> None:
    with pytest.raises(DecodeError) as info:
        ComputeDomain.from_dict(obj)
    assert message in str(info.value)
    assert isinstance(info.value, PermanentError)


def test_unknown_fields_of_stored_objects_are_tolerated() -> None:
    obj = _cd(spec={"future": 1, "channel": {"resourceClaimTemplate": {"name": "a"}}})
    assert ComputeDomain.from_dict(obj).spec.channel.resource_claim_template.name == "a"


@pytest.mark.parametrize(
    ("statuses", "num_nodes", "expected"),
    [
        ([], 0, Readiness.READY),
        ([], 1, Readiness.NOT_READY),
        ([Readiness.READY, Readiness.READY], 2, Readiness.READY),
        ([Readiness.READY, Readiness.READY], 3, Readiness.NOT_READY),
        ([Readiness.READY, Readiness.NOT_READY], 0, Readiness.NOT_READY),
        ([Readiness.READY] * 3, 2, Readiness.READY),
    ],
    ids=[
        "no-nodes-no-wait",
        "waits-for-num-nodes",
        "all-ready",
        "too-few",
        "one-not-ready",
        "more-than-num-nodes",
    ],
)
def test_computed_status_follows_upstream_rule(
    statuses: list[Readiness], num_nodes: int, expected: Readiness
) -> None:
    nodes = [_node(f"n{i}", s, i) for i, s in enumerate(statuses)]
    status = ComputeDomainStatus.computed(nodes, num_nodes=num_nodes)
    assert status.status is expected
    assert status.nodes == tuple(nodes)


def test_counters_and_lookup() -> None:
    status = ComputeDomainStatus(
        nodes=(_node("a", Readiness.READY), _node("b", Readiness.NOT_READY, 1))
    )
    assert (status.ready_nodes, status.total_nodes) == (1, 2)
    assert status.node("b") == _node("b", Readiness.NOT_READY, 1)
    assert status.node("zzz") is None


def test_resource_classes_are_namespaced_with_status_subresource() -> None:
    info = api_info(ComputeDomainResource)
    assert issubclass(ComputeDomainResource, NamespacedResource)
    assert (info.resource.group, info.resource.version, info.resource.kind, info.plural) == (
        names.GROUP,
        names.VERSION,
        "ComputeDomain",
        "computedomains",
    )
    status_info = api_info(ComputeDomainStatusResource)
    assert (status_info.action, status_info.plural) == ("status", "computedomains")


def test_lightkube_resources_round_trip() -> None:
    cd = ComputeDomain.from_dict(_cd(status={"status": "Ready"}))
    resource = cd.to_resource()
    assert isinstance(resource, ComputeDomainResource)
    assert resource.metadata == ObjectMeta(
        name="compute-domain-0", namespace="default", uid="uid-1"
    )
    assert ComputeDomain.from_resource(resource) == cd
    assert ComputeDomain.from_resource(ComputeDomainResource.from_dict(_cd())).status is None


@settings(max_examples=60, deadline=None)
@given(strategies.computedomains)
def test_objects_round_trip_through_json(cd: ComputeDomain) -> None:
    wire = json.loads(json.dumps(cd.to_dict()))
    assert ComputeDomain.from_dict(wire) == cd
    assert ComputeDomain.from_dict(wire).to_dict() == wire


@settings(max_examples=60, deadline=None)
@given(strategies.specs)
def test_specs_round_trip(spec: ComputeDomainSpec) -> None:
    assert ComputeDomainSpec.from_dict(spec.to_dict()) == spec
