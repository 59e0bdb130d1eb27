"""DRA end to end at the control-plane level, against the real binaries.

A DeviceClass and a ResourceSlice published for a Node, then a Pod with a
ResourceClaimTemplate: the real kube-controller-manager must create the claim from the
template, and the real kube-scheduler must allocate a device of that slice and bind the pod
to the node that owns it (and to no other node).
"""

from __future__ import annotations

import uuid

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Namespace, Node, Pod, ServiceAccount
from lightkube.resources.resource_v1 import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)

from tests.integration.helpers import wait_for

DRIVER = "test.compute-domains.dev"


def _node(name: str) -> Node:
    return Node.from_dict({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})


async def _make_ready(client: AsyncClient, name: str) -> None:
    status = {
        "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
        "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test node"}
        ],
    }
    await client.patch(Node.Status, name, {"status": status})


async def test_scheduler_allocates_device_from_slice_and_binds(client: AsyncClient) -> None:
    suffix = uuid.uuid4().hex[:6]
    ns, gpu_node, plain_node = f"dra-{suffix}", f"gpu-{suffix}", f"plain-{suffix}"
    await client.create(Namespace.from_dict({"metadata": {"name": ns}}))
    # The real ServiceAccount controller creates "default" shortly after the namespace.
    await wait_for(client, ServiceAccount, "default", lambda _sa: True, namespace=ns)
    for name in (gpu_node, plain_node):
        await client.create(_node(name))
        await _make_ready(client, name)
    await client.create(
        DeviceClass.from_dict(
            {
                "metadata": {"name": f"{DRIVER}-{suffix}"},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            }
        )
    )
    await client.create(
        ResourceSlice.from_dict(
            {
                "metadata": {"name": f"{gpu_node}-slice"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": gpu_node,
                    "pool": {"name": gpu_node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": "dev-0", "attributes": {"index": {"int": 0}}},
                        {"name": "dev-1", "attributes": {"index": {"int": 1}}},
                    ],
                },
            }
        )
    )
    await client.create(
        ResourceClaimTemplate.from_dict(
            {
                "metadata": {"name": "one-device", "namespace": ns},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "dev",
                                    "exactly": {"deviceClassName": f"{DRIVER}-{suffix}"},
                                },
                            ]
                        }
                    }
                },
            }
        )
    )
    await client.create(
        Pod.from_dict(
            {
                "metadata": {"name": "consumer", "namespace": ns},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"claims": [{"name": "dev"}]},
                        }
                    ],
                    "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "one-device"}],
                    "tolerations": [{"operator": "Exists"}],
                },
            }
        )
    )

    pod = await wait_for(
        client,
        Pod,
        "consumer",
        lambda p: bool(p.spec and p.spec.nodeName),
        namespace=ns,
        timeout=90,
    )
    assert pod.spec is not None and pod.spec.nodeName == gpu_node
    assert pod.status is not None and pod.status.resourceClaimStatuses
    claim_name = pod.status.resourceClaimStatuses[0].resourceClaimName
    assert claim_name, "the controller-manager did not record the generated claim on the pod"

    claim = await client.get(ResourceClaim, claim_name, namespace=ns)
    assert claim.metadata is not None and claim.metadata.ownerReferences
    assert claim.metadata.ownerReferences[0].uid == pod.metadata.uid  # type: ignore[union-attr]
    assert claim.status is not None and claim.status.allocation is not None
    results = claim.status.allocation.devices.results  # type: ignore[union-attr]
    assert len(results) == 1
    assert (results[0].driver, results[0].pool) == (DRIVER, gpu_node)
    assert results[0].device in {"dev-0", "dev-1"}
    assert results[0].request == "dev"
    reserved = claim.status.reservedFor or []
    assert [r.uid for r in reserved] == [pod.metadata.uid]  # type: ignore[union-attr]
    selector = claim.status.allocation.nodeSelector
    assert selector is not None
    assert selector.nodeSelectorTerms[0].matchFields[0].values == [gpu_node]  # type: ignore[index]
