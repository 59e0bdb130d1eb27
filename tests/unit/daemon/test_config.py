"""DaemonSettings validation: upstream's start-up failures as one clear ConfigError."""

from __future__ import annotations

import dataclasses

import pytest

from compute_domains.daemon.config import CDI_HINT, DaemonSettings, Identity
from compute_domains.infra.errors import ConfigError

GOOD = Identity(
    node_name="n",
    pod_name="p",
    pod_namespace="driver",
    pod_uid="u",
    pod_ip="10.0.0.1",
    clique_id="cluster.1",
    domain_uid="cd",
)


@pytest.mark.parametrize(
    ("change", "max_nodes", "clique"),
    [
        ({}, 18, "cd.cluster.1"),
        ({}, 1, "cd.cluster.1"),
        ({"pod_ip": "fd00::1"}, 18, "cd.cluster.1"),
        # Without a clique no IMEX runs: neither the pod IP nor the slot count is needed.
        ({"clique_id": "", "pod_ip": ""}, 0, ""),
    ],
    ids=["fabric", "one-slot", "ipv6", "no-clique"],
)
def test_a_complete_identity_is_accepted(
    change: dict[str, str], max_nodes: int, clique: str
) -> None:
    ident = dataclasses.replace(GOOD, **change)
    settings = DaemonSettings(identity=ident, max_nodes=max_nodes)
    assert settings.validate() is None  # no ConfigError
    assert ident.has_clique is bool(clique)
    if clique:
        assert ident.clique_name == clique, "the clique object the daemon will register in"


@pytest.mark.parametrize(
    ("change", "max_nodes", "message"),
    [
        ({"domain_uid": ""}, 18, CDI_HINT),
        ({"node_name": ""}, 18, "NODE_NAME"),
        ({"pod_uid": "", "pod_name": ""}, 18, "POD_NAME, --pod-uid/POD_UID"),
        ({"pod_ip": "nope"}, 18, "is not an IP"),
        ({}, 0, "MAX_NODES_PER_IMEX_DOMAIN"),
    ],
    ids=["no-cdi", "no-node", "no-pod", "bad-ip", "no-slots"],
)
def test_missing_or_bad_identity_is_a_config_error(
    change: dict[str, str], max_nodes: int, message: str
) -> None:
    ident = dataclasses.replace(GOOD, **change)
    with pytest.raises(ConfigError, match=message):
        DaemonSettings(identity=ident, max_nodes=max_nodes).validate()


def test_a_node_without_clique_needs_no_pod_ip() -> None:
    ident = dataclasses.replace(GOOD, clique_id="", pod_ip="")
    DaemonSettings(identity=ident, max_nodes=0).validate()
    assert not ident.has_clique


def test_the_clique_object_name_joins_domain_uid_and_clique_id() -> None:
    assert GOOD.clique_name == "cd.cluster.1"


def test_a_metrics_port_out_of_range_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="METRICS_PORT out of range: 65536"):
        DaemonSettings(identity=GOOD, metrics_port=65536).validate()
