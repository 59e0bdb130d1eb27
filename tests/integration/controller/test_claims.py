"""The workload template's channel selector, evaluated by the real kube-scheduler.

Contract with the kubelet plugin: it publishes several channel slots per node and marks a slot
bound to a CD with the string attribute ``domain`` = that CD's UID. The controller's workload
template must then get a free slot or one of its own CD, never another CD's. The templates the
controller renders are copied with only the DeviceClass swapped for a test class (the driver's
DeviceClasses ship with the plugin's part of the chart), so the CEL selector under test is
exactly the rendered one.
"""

from __future__ import annotations

import uuid
from typing import Any

from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)

from compute_domains.api import names
from compute_domains.api.computedomain import (
    ChannelSpec,
    ComputeDomain,
    ComputeDomainSpec,
    ResourceClaimTemplateRef,
)
from compute_domains.controller import claimtemplates
from tests.integration.controller import objects
from tests.integration.helpers import wait_for


def _slot(index: int, domain: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {"type": {"string": "channel"}, "id": {"int": index}}
    if domain is not None:
        attributes["domain"] = {"string": domain}
    return {"name": f"channel-{index}", "attributes": attributes}


async def _template_for(client: AsyncClient, ns: str, domain_uid: str, device_class: str) -> str:
    cd = ComputeDomain(
        metadata=ObjectMeta(name="cd", namespace=ns, uid=domain_uid),
        spec=ComputeDomainSpec(
            channel=ChannelSpec(resource_claim_template=ResourceClaimTemplateRef(name="x"))
        ),
    )
    body = claimtemplates.workload_template(cd).to_dict()
    name = f"channel-{domain_uid[:8]}"
    body["metadata"] = {"name": name, "namespace": ns}
    body["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = device_class
    await client.create(ResourceClaimTemplate.from_dict(body))
    return name


async def _pod(client: AsyncClient, ns: str, name: str, template: str, node: str) -> None:
    body = {
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": "channel"}]},
                }
            ],
            "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": template}],
        },
    }
    await client.create(Pod.from_dict(body))


async def _allocated_device(client: AsyncClient, ns: str, pod_name: str) -> str:
    pod = await wait_for(
        client, Pod, pod_name, lambda p: bool(p.spec.nodeName), namespace=ns, timeout=90
    )
    claim_name = pod.status.resourceClaimStatuses[0].resourceClaimName
    claim = await client.get(ResourceClaim, claim_name, namespace=ns)
    (result,) = claim.status.allocation.devices.results
    return str(result.device)


async def test_channel_selector_takes_free_or_own_slots_only(
    client: AsyncClient, user_ns: str
) -> None:
    suffix = uuid.uuid4().hex[:6]
    mine, other, third = (str(uuid.uuid4()) for _ in range(3))
    node = f"ch-{suffix}"
    device_class = f"cd-test-channel-{suffix}"
    await client.create(
        DeviceClass.from_dict(
            {
                "metadata": {"name": device_class},
                "spec": {
                    "selectors": [
                        {"cel": {"expression": f'device.driver == "{names.DRIVER_NAME}"'}}
                    ]
                },
            }
        )
    )
    async with objects.nodes(client, node):
        slice_name = f"{node}-cd"
        pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
        spec = {"driver": names.DRIVER_NAME, "nodeName": node, "pool": pool}
        devices = [_slot(0, other), _slot(1, mine)]
        await client.create(
            ResourceSlice.from_dict(
                {"metadata": {"name": slice_name}, "spec": {**spec, "devices": devices}}
            )
        )
        try:
            mine_rct = await _template_for(client, user_ns, mine, device_class)
            other_rct = await _template_for(client, user_ns, other, device_class)
            third_rct = await _template_for(client, user_ns, third, device_class)

            await _pod(client, user_ns, "mine-0", mine_rct, node)
            assert await _allocated_device(client, user_ns, "mine-0") == "channel-1"
            await _pod(client, user_ns, "other-0", other_rct, node)
            assert await _allocated_device(client, user_ns, "other-0") == "channel-0"

            # Every slot is bound to another CD: a third CD's pod cannot be scheduled ...
            await _pod(client, user_ns, "third-0", third_rct, node)
            await wait_for(
                client,
                Pod,
                "third-0",
                lambda p: any(
                    c.type == "PodScheduled" and c.reason == "Unschedulable"
                    for c in (p.status.conditions or [])
                ),
                namespace=user_ns,
                timeout=90,
            )
            # ... until the plugin publishes a free slot.
            current = await client.get(ResourceSlice, slice_name)
            current.spec.pool.generation += 1
            current.spec.devices = [
                *current.spec.devices,
                ResourceSlice.from_dict(
                    {"metadata": {}, "spec": {**spec, "devices": [_slot(2, None)]}}
                ).spec.devices[0],
            ]
            await client.replace(current)
            assert await _allocated_device(client, user_ns, "third-0") == "channel-2"
        finally:
            await client.delete(ResourceSlice, slice_name)
            await client.delete(DeviceClass, device_class)
