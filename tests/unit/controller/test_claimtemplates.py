"""Rendering of the daemon and workload ResourceClaimTemplates (§7.4 plus the channel selector)."""

from __future__ import annotations

import pytest
from lightkube.models.meta_v1 import ObjectMeta

from compute_domains.api import names
from compute_domains.api.computedomain import (
    AllocationMode,
    ChannelSpec,
    ComputeDomain,
    ComputeDomainSpec,
    ResourceClaimTemplateRef,
)
from compute_domains.controller import claimtemplates

UID = "5b0e6f1e-0000-4000-8000-000000000002"
ATTRS = 'device.attributes["compute-domain.nvidia.com"]'


def _cd(mode: AllocationMode) -> ComputeDomain:
    return ComputeDomain(
        metadata=ObjectMeta(name="cd", namespace="team-a", uid=UID),
        spec=ComputeDomainSpec(
            channel=ChannelSpec(
                resource_claim_template=ResourceClaimTemplateRef(name="cd-channel"),
                allocation_mode=mode,
            )
        ),
    )


def test_daemon_template_is_upstreams() -> None:
    rct = claimtemplates.daemon_template(domain_uid=UID, namespace="cd-system").to_dict()
    assert rct["apiVersion"] == "resource.k8s.io/v1"
    assert rct["metadata"] == {
        "finalizers": [names.FINALIZER],
        "labels": {names.COMPUTE_DOMAIN_LABEL: UID, names.TARGET_LABEL: "Daemon"},
        "name": f"computedomain-daemon-{UID}",
        "namespace": "cd-system",
    }
    assert rct["spec"] == {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "daemon",
                        "exactly": {"deviceClassName": "compute-domain-daemon.nvidia.com"},
                    }
                ],
                "config": [
                    {
                        "requests": ["daemon"],
                        "opaque": {
                            "driver": "compute-domain.nvidia.com",
                            "parameters": {
                                "apiVersion": "resource.nvidia.com/v1beta1",
                                "kind": "ComputeDomainDaemonConfig",
                                "domainID": UID,
                            },
                        },
                    }
                ],
            }
        }
    }


@pytest.mark.parametrize("mode", list(AllocationMode), ids=str)
def test_workload_template_selects_a_free_or_own_channel_slot(mode: AllocationMode) -> None:
    rct = claimtemplates.workload_template(_cd(mode)).to_dict()
    assert rct["metadata"] == {
        "finalizers": [names.FINALIZER],
        "labels": {names.COMPUTE_DOMAIN_LABEL: UID, names.TARGET_LABEL: "Workload"},
        "name": "cd-channel",
        "namespace": "team-a",
    }
    devices = rct["spec"]["spec"]["devices"]
    assert devices["requests"] == [
        {
            "name": "channel",
            "exactly": {
                "deviceClassName": "compute-domain-default-channel.nvidia.com",
                "selectors": [
                    {"cel": {"expression": f'!has({ATTRS}.domain) || {ATTRS}.domain == "{UID}"'}}
                ],
            },
        }
    ]
    assert devices["config"] == [
        {
            "requests": ["channel"],
            "opaque": {
                "driver": "compute-domain.nvidia.com",
                "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1",
                    "kind": "ComputeDomainChannelConfig",
                    "domainID": UID,
                    "allocationMode": mode.value,
                },
            },
        }
    ]


def test_a_per_clique_template_selects_a_free_or_shared_channel_slot() -> None:
    """Never a slot of a node a per-domain CD holds, whatever its UID; the config is the CD's."""
    rct = claimtemplates.workload_template(_cd(AllocationMode.SINGLE), shared=True).to_dict()
    (request,) = rct["spec"]["spec"]["devices"]["requests"]
    (selector,) = request["exactly"]["selectors"]
    assert selector["cel"]["expression"] == (
        f'!has({ATTRS}.domain) || {ATTRS}.domain == "shared-imex"'
    )
    (config,) = rct["spec"]["spec"]["devices"]["config"]
    assert config["opaque"]["parameters"]["domainID"] == UID
    assert rct["metadata"]["labels"][names.COMPUTE_DOMAIN_LABEL] == UID
