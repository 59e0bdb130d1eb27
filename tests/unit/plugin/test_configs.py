from typing import Any

import pytest

from compute_domains.api import configs as api_configs
from compute_domains.api.computedomain import AllocationMode
from compute_domains.infra import errors
from compute_domains.plugin import configs, devices
from tests.unit.plugin import fakes

OFFERED = devices.allocatable(4)


def _plan(results: list[dict[str, Any]], config: list[dict[str, Any]]) -> configs.Plan:
    return configs.plan(fakes.claim("u1", results, config), node=fakes.NODE, offered=OFFERED)


@pytest.mark.parametrize(
    ("config", "want_domain", "want_mode"),
    [
        ([fakes.config_entry(fakes.channel_config("a"))], "a", AllocationMode.SINGLE),
        (
            [
                fakes.config_entry(fakes.channel_config("class"), source="FromClass"),
                fakes.config_entry(fakes.channel_config("claim", "All")),
            ],
            "claim",
            AllocationMode.ALL,
        ),
        (
            # The claim entry comes first in the list but still overrides the class entry.
            [
                fakes.config_entry(fakes.channel_config("claim")),
                fakes.config_entry(fakes.channel_config("class"), source="FromClass"),
            ],
            "claim",
            AllocationMode.SINGLE,
        ),
        (
            [
                fakes.config_entry(fakes.channel_config("named"), requests=("channel",)),
                fakes.config_entry(fakes.channel_config("generic")),
            ],
            "generic",
            AllocationMode.SINGLE,
        ),
        (
            [
                fakes.config_entry(fakes.channel_config("other"), requests=("elsewhere",)),
                fakes.config_entry(fakes.channel_config("mine"), requests=("channel",)),
            ],
            "mine",
            AllocationMode.SINGLE,
        ),
        (
            [
                fakes.config_entry(fakes.channel_config("x")),
                {"source": "FromClaim", "opaque": {"driver": "gpu.nvidia.com", "parameters": {}}},
            ],
            "x",
            AllocationMode.SINGLE,
        ),
        (
            [
                fakes.config_entry(fakes.daemon_config("d")),
                fakes.config_entry(fakes.channel_config("c")),
            ],
            "c",
            AllocationMode.SINGLE,
        ),
    ],
    ids=[
        "single-claim-config",
        "claim-overrides-class",
        "precedence-by-source-not-list-order",
        "later-generic-beats-earlier-named",
        "named-request-matches",
        "other-drivers-ignored",
        "wrong-kind-without-requests-skipped",
    ],
)
def test_config_precedence(
    config: list[dict[str, Any]], want_domain: str, want_mode: AllocationMode
) -> None:
    plan = _plan([fakes.result("channel-1")], config)
    (a,) = plan.assignments
    assert plan.domain_uid == want_domain
    assert isinstance(a.config, api_configs.ComputeDomainChannelConfig)
    assert a.config.allocation_mode is want_mode
    assert (a.device, a.type) == ("channel-1", devices.DeviceType.CHANNEL)


def test_subrequest_results_match_their_parent_request_and_strip_the_suffix() -> None:
    plan = _plan(
        [fakes.result("channel-0", request="chan/fast")],
        [fakes.config_entry(fakes.channel_config("a"), requests=("chan",))],
    )
    assert plan.assignments[0].request_name == "chan"


def test_all_mode_means_2048_channels_and_single_means_channel_zero() -> None:
    single = _plan([fakes.result("channel-3")], [fakes.config_entry(fakes.channel_config("a"))])
    every = _plan(
        [fakes.result("channel-3")], [fakes.config_entry(fakes.channel_config("a", "All"))]
    )
    assert list(single.assignments[0].channels) == [0]
    assert len(every.assignments[0].channels) == 2048


def test_results_of_other_drivers_are_ignored() -> None:
    other = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "p", "device": "gpu-0"}
    plan = _plan(
        [other, fakes.result("daemon-0", request="daemon")],
        [fakes.config_entry(fakes.daemon_config("d"))],
    )
    assert [a.device for a in plan.assignments] == ["daemon-0"]
    assert plan.has_daemon and not plan.has_channels


@pytest.mark.parametrize(
    ("results", "config", "message"),
    [
        (
            [fakes.result("channel-0")],
            [fakes.config_entry(fakes.channel_config("a", unexpectedField="foo"))],
            'unknown field "unexpectedField"',
        ),
        (
            [fakes.result("channel-0")],
            [fakes.config_entry({**fakes.channel_config("a"), "kind": "GpuConfig"})],
            'unknown kind "GpuConfig"',
        ),
        ([fakes.result("channel-0")], [], "no ComputeDomainChannelConfig applies"),
        (
            [fakes.result("channel-0")],
            [fakes.config_entry(fakes.daemon_config("a"), requests=("channel",))],
            "cannot apply ComputeDomainDaemonConfig to request channel",
        ),
        (
            [fakes.result("channel-9")],
            [fakes.config_entry(fakes.channel_config("a"))],
            "channel-9 is not allocatable",
        ),
        (
            [{**fakes.result("channel-0"), "pool": "node-b"}],
            [fakes.config_entry(fakes.channel_config("a"))],
            "node-b/channel-0 is not allocatable",
        ),
        (
            [fakes.result("channel-0"), fakes.result("daemon-0", request="daemon")],
            [
                fakes.config_entry(fakes.channel_config("a")),
                fakes.config_entry(fakes.daemon_config("b")),
            ],
            "more than one ComputeDomain",
        ),
        (
            [fakes.result("channel-0")],
            [{"source": "FromClaim"}],
            "only opaque parameters",
        ),
        ([], [], "has no device of compute-domain.nvidia.com"),
    ],
    ids=[
        "unknown-field",
        "unknown-kind",
        "no-config",
        "config-of-wrong-kind-for-named-request",
        "device-not-offered",
        "device-of-another-node",
        "two-domains",
        "not-opaque",
        "no-device-of-ours",
    ],
)
def test_bad_claims_fail_permanently(
    results: list[dict[str, Any]], config: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(errors.PermanentError, match=message):
        _plan(results, config)


def test_unallocated_claim_fails_permanently() -> None:
    claim = configs.Claim(uid="u", namespace="ns", name="c", resource_version="1", status={})
    with pytest.raises(errors.PermanentError, match="not allocated"):
        configs.plan(claim, node=fakes.NODE, offered=OFFERED)


def test_admin_access_devices_are_left_out_of_the_overlap_set() -> None:
    plan = _plan(
        [fakes.result("channel-0", adminAccess=True), fakes.result("channel-1")],
        [fakes.config_entry(fakes.channel_config("a"))],
    )
    assert plan.device_names() == {"channel-1"}
    assert plan.device_names(include_admin=True) == {"channel-0", "channel-1"}
