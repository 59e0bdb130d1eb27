"""The two ResourceClaimTemplates of a ComputeDomain (``resource.k8s.io/v1``), as typed objects.

Daemon template (driver namespace), exactly upstream's (spec §7.4): name
``computedomain-daemon-<cdUID>``, one request ``daemon`` of the daemon DeviceClass, an opaque
``ComputeDomainDaemonConfig{domainID}`` for the driver.

Workload template (the CD's namespace, named by ``spec.channel.resourceClaimTemplate.name``):
upstream's, plus one CEL selector on the ``channel`` request. Beyond upstream, the kubelet plugin
publishes several channel slots per node and marks a slot bound to a CD with the string
attribute ``domain`` = that CD's UID; the selector lets a workload claim take a free slot or one
already bound to its own CD, never one bound to another CD. A per-clique CD's template selects a
free slot or one of a node in the per-clique scope (``sharedimex.channel_selector``), never one a
per-domain CD holds.

Both carry the CD label, the target label (``Daemon``/``Workload``) and our finalizer; no owner
references (the workload template lives in another namespace than the daemon objects, and the
controller deletes both itself).
"""

from __future__ import annotations

from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.resource_v1 import (
    CELDeviceSelector,
    DeviceClaim,
    DeviceClaimConfiguration,
    DeviceRequest,
    DeviceSelector,
    ExactDeviceRequest,
    OpaqueDeviceConfiguration,
    ResourceClaimSpec,
    ResourceClaimTemplateSpec,
)
from lightkube.resources.resource_v1 import ResourceClaimTemplate

from compute_domains.api import configs, names, sharedimex
from compute_domains.api.computedomain import ComputeDomain


def _metadata(*, name: str, namespace: str, domain_uid: str, target: str) -> ObjectMeta:
    return ObjectMeta(
        name=name,
        namespace=namespace,
        labels={names.COMPUTE_DOMAIN_LABEL: domain_uid, names.TARGET_LABEL: target},
        finalizers=[names.FINALIZER],
    )


def _template(
    meta: ObjectMeta, request: DeviceRequest, config: configs.OpaqueConfig
) -> ResourceClaimTemplate:
    opaque = OpaqueDeviceConfiguration(driver=names.DRIVER_NAME, parameters=config.to_dict())
    claim = ResourceClaimSpec(
        devices=DeviceClaim(
            requests=[request],
            config=[DeviceClaimConfiguration(requests=[request.name], opaque=opaque)],
        )
    )
    return ResourceClaimTemplate(metadata=meta, spec=ResourceClaimTemplateSpec(spec=claim))


def daemon_template(*, domain_uid: str, namespace: str) -> ResourceClaimTemplate:
    """The daemon ResourceClaimTemplate of CD ``domain_uid`` in the driver ``namespace``."""
    meta = _metadata(
        name=names.daemon_object_name(domain_uid),
        namespace=namespace,
        domain_uid=domain_uid,
        target=names.TARGET_DAEMON,
    )
    request = DeviceRequest(
        name=names.DAEMON_REQUEST,
        exactly=ExactDeviceRequest(deviceClassName=names.DAEMON_DEVICE_CLASS),
    )
    return _template(meta, request, configs.ComputeDomainDaemonConfig(domain_uid=domain_uid))


def workload_template(cd: ComputeDomain, *, shared: bool = False) -> ResourceClaimTemplate:
    """The workload ResourceClaimTemplate the CD names, in the CD's namespace (``shared``: the
    CD is served in the per-clique scope)."""
    selector = sharedimex.channel_selector() if shared else names.channel_selector(cd.uid)
    meta = _metadata(
        name=cd.spec.channel.resource_claim_template.name,
        namespace=cd.namespace,
        domain_uid=cd.uid,
        target=names.TARGET_WORKLOAD,
    )
    request = DeviceRequest(
        name=names.CHANNEL_REQUEST,
        exactly=ExactDeviceRequest(
            deviceClassName=names.CHANNEL_DEVICE_CLASS,
            selectors=[DeviceSelector(cel=CELDeviceSelector(expression=selector))],
        ),
    )
    config = configs.ComputeDomainChannelConfig(
        domain_uid=cd.uid, allocation_mode=cd.spec.channel.allocation_mode
    )
    return _template(meta, request, config)
