"""Controller settings: defaults and the combinations rejected at start-up."""

from __future__ import annotations

from typing import Any

import pytest

from compute_domains import controller
from compute_domains.infra import errors


def _settings(**kw: Any) -> controller.ControllerSettings:
    daemon = kw.pop("daemon", None) or controller.DaemonSettings(image="img:1")
    return controller.ControllerSettings(namespace=kw.pop("namespace", "ns"), daemon=daemon, **kw)


def test_defaults_match_upstream_where_upstream_has_one() -> None:
    s = _settings()
    assert s.daemon.max_nodes_per_imex_domain == 18
    le = s.leader_election
    assert (le.lease_duration_s, le.renew_deadline_s, le.retry_period_s) == (15.0, 10.0, 2.0)
    assert not le.enabled
    assert s.lease_namespace == "ns"
    assert (
        _settings(
            leader_election=controller.LeaderElectionSettings(lease_namespace="elsewhere")
        ).lease_namespace
        == "elsewhere"
    )


@pytest.mark.parametrize(
    "build",
    [
        lambda: _settings(namespace=""),
        lambda: _settings(workers=0),
        lambda: _settings(metrics_port=70000),
        lambda: _settings(sweep_interval_s=0),
        lambda: controller.DaemonSettings(image=""),
        lambda: controller.DaemonSettings(image="i", max_nodes_per_imex_domain=0),
        lambda: controller.LeaderElectionSettings(renew_deadline_s=20.0),
        lambda: controller.LeaderElectionSettings(retry_period_s=0.0),
        lambda: _settings(imex_agents="perNode"),
    ],
    ids=[
        "no-namespace",
        "no-workers",
        "bad-port",
        "no-sweep",
        "no-image",
        "no-slots",
        "renew-after-expiry",
        "no-retry-period",
        "unknown-imex-agents",
    ],
)
def test_impossible_settings_are_config_errors(build: Any) -> None:
    with pytest.raises(errors.ConfigError):
        build()


def test_per_cd_daemons_by_default_and_not_with_resident_agents() -> None:
    assert _settings().per_cd_daemons
    assert _settings().imex_agents == "perComputeDomain"
    assert not _settings(imex_agents="resident").per_cd_daemons
