import importlib
from typing import Any

import pytest

from compute_domains._proto.dra.v1 import api_pb2 as v1
from compute_domains._proto.dra.v1beta1 import api_pb2 as v1beta1
from compute_domains._proto.dra_health.v1alpha1 import api_pb2 as health
from compute_domains._proto.pluginregistration.v1 import api_pb2 as registration


@pytest.mark.parametrize("api", [v1, v1beta1], ids=["v1", "v1beta1"])
def test_prepare_request_round_trips(api: Any) -> None:
    request = api.NodePrepareResourcesRequest(
        claims=[api.Claim(namespace="ns", uid="uid-1", name="c")]
    )
    data = request.SerializeToString()
    back = api.NodePrepareResourcesRequest.FromString(data)
    assert back == request
    assert [(c.namespace, c.uid, c.name) for c in back.claims] == [("ns", "uid-1", "c")]


def test_v1_and_v1beta1_share_the_wire_format() -> None:
    response = v1.NodePrepareResourcesResponse()
    response.claims["uid-1"].devices.add(
        request_names=["r"], pool_name="p", device_name="d", cdi_device_ids=["v/c=x"]
    )
    response.claims["uid-2"].error = "boom"
    legacy = v1beta1.NodePrepareResourcesResponse.FromString(response.SerializeToString())
    assert legacy.claims["uid-1"].devices[0].cdi_device_ids == ["v/c=x"]
    assert legacy.claims["uid-2"].error == "boom"


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        (v1.Claim, {"namespace": 1, "uid": 2, "name": 3}),
        (v1.Device, {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}),
        (v1.NodePrepareResourceResponse, {"devices": 1, "error": 2}),
        (v1.NodeUnprepareResourceResponse, {"error": 1}),
        (
            registration.PluginInfo,
            {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4},
        ),
        (registration.RegistrationStatus, {"plugin_registered": 1, "error": 2}),
        (health.DeviceHealth, {"device": 1, "health": 2, "last_updated_time": 3}),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_field_numbers_match_the_contract(message: Any, fields: dict[str, int]) -> None:
    descriptor = message.DESCRIPTOR
    assert {f.name: f.number for f in descriptor.fields} == fields


@pytest.mark.parametrize(
    ("module", "service", "methods"),
    [
        (
            v1,
            "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
            ["NodePrepareResources", "NodeUnprepareResources"],
        ),
        (
            v1beta1,
            "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
            ["NodePrepareResources", "NodeUnprepareResources"],
        ),
        (registration, "pluginregistration.Registration", ["GetInfo", "NotifyRegistrationStatus"]),
        (health, "v1alpha1.DRAResourceHealth", ["NodeWatchResources"]),
    ],
    ids=["dra-v1", "dra-v1beta1", "registration", "health"],
)
def test_service_paths_match_the_contract(module: Any, service: str, methods: list[str]) -> None:
    (svc,) = module.DESCRIPTOR.services_by_name.values()
    assert svc.full_name == service
    assert [m.name for m in svc.methods] == methods
    assert [m.server_streaming for m in svc.methods] == [service.endswith("Health")] * len(methods)


@pytest.mark.parametrize(
    "name",
    [
        "compute_domains._proto.dra.v1.api_pb2_grpc",
        "compute_domains._proto.dra.v1beta1.api_pb2_grpc",
        "compute_domains._proto.pluginregistration.v1.api_pb2_grpc",
        "compute_domains._proto.dra_health.v1alpha1.api_pb2_grpc",
    ],
)
def test_grpc_modules_import_with_package_paths(name: str) -> None:
    module = importlib.import_module(name)
    assert any(n.startswith("add_") and n.endswith("Servicer_to_server") for n in dir(module))


def test_health_enum_values() -> None:
    assert (health.UNKNOWN, health.HEALTHY, health.UNHEALTHY) == (0, 1, 2)
