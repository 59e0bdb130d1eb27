"""The resident agent's pure label logic and its settings' checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compute_domains.agent import labels
from compute_domains.agent.config import AgentSettings, Assignment, Shared, Wants
from compute_domains.api import imexsignal, names, sharedimex
from compute_domains.infra import errors

CD = names.COMPUTE_DOMAIN_LABEL
CLIQUE = names.GPU_CLIQUE_LABEL
WARM = names.WARM_FOR_LABEL


@pytest.mark.parametrize(
    ("node_labels", "wanted"),
    [
        (None, None),
        ({}, None),
        ({CD: ""}, None),
        ({CLIQUE: "c.1"}, None),
        ({CD: "u1"}, Assignment(domain_uid="u1", clique_id="")),
        ({CD: "u1", CLIQUE: "c.1", "x": "y"}, Assignment(domain_uid="u1", clique_id="c.1")),
        ({WARM: "u2", CLIQUE: "c.1"}, Assignment(domain_uid="u2", clique_id="c.1")),
        ({WARM: "u2", CD: "u1", CLIQUE: "c.1"}, Assignment(domain_uid="u1", clique_id="c.1")),
        ({WARM: "", CLIQUE: "c.1"}, None),
    ],
    ids=[
        "none",
        "empty",
        "empty-cd",
        "clique-only",
        "cd-no-fabric",
        "cd-and-clique",
        "warm-spare",
        "claim-wins-over-warm",
        "empty-warm",
    ],
)
def test_assignment_of_a_node(node_labels: dict[str, str] | None, wanted: Any) -> None:
    assert labels.assignment_of(node_labels) == wanted


def test_pod_label_patch_sets_both_labels_in_one_write_and_removes_both_after() -> None:
    # The clique ID label (the request for a clique slot) rides on the CD label's patch, and
    # so does the removal of a readiness signal an earlier daemon of this CD left behind.
    stale = {imexsignal.key("u1"): None}
    both = {CD: "u1", names.CLIQUE_ID_LABEL: "c.1"}
    assert labels.pod_label_patch("u1", "c.1") == {
        "metadata": {"labels": both, "annotations": stale}
    }
    # A node without multi-node NVLink: the empty value, as a per-CD daemon writes it.
    no_fabric = {CD: "u1", names.CLIQUE_ID_LABEL: ""}
    assert labels.pod_label_patch("u1") == {"metadata": {"labels": no_fabric, "annotations": stale}}
    removed = labels.pod_label_patch(None)
    assert removed == {"metadata": {"labels": {CD: None, names.CLIQUE_ID_LABEL: None}}}
    # Leaving a CD removes its signal in the unlabel's write.
    leaving = labels.pod_label_patch(None, leaving=["u2", "u1"])
    assert leaving["metadata"]["annotations"] == {
        imexsignal.key("u1"): None,
        imexsignal.key("u2"): None,
    }


def test_the_signals_left_on_a_pod_are_found_by_their_prefix() -> None:
    notes = {
        imexsignal.key("u1"): "{}",
        "prometheus.io/port": "9",
        **imexsignal.DECLARED,
        imexsignal.key("u0"): "{}",
    }
    assert labels.signals_left(notes) == ["u0", "u1"]
    assert labels.signals_left(None) == []


def test_node_labels_of_a_missing_node_are_empty() -> None:
    assert labels.node_labels(None) == {}


@pytest.mark.parametrize(
    "kw",
    [
        {"node_name": ""},
        {"pod_name": ""},
        {"pod_namespace": ""},
        {"metrics_port": 70000},
        {"stop_timeout": 0},
    ],
    ids=["no-node", "no-pod", "no-namespace", "bad-port", "no-stop-time"],
)
def test_impossible_agent_settings_are_config_errors(kw: dict[str, Any]) -> None:
    base: dict[str, Any] = {"node_name": "n", "pod_name": "p", "pod_namespace": "ns"}
    with pytest.raises(errors.ConfigError):
        AgentSettings(**{**base, **kw})


def test_agent_settings_defaults() -> None:
    s = AgentSettings(node_name="n", pod_name="p", pod_namespace="ns")
    assert s.domains_dir == Path("/domains")
    assert s.metrics_port == 0
    assert not s.shared_imex_eager  # only the chart's perClique scope turns it on


SHARED = sharedimex.SHARED_IMEX_LABEL


@pytest.mark.parametrize(
    ("node_labels", "wanted"),
    [
        (None, Wants()),
        ({SHARED: "on"}, Wants(shared_without_clique=True)),
        ({SHARED: "off", CLIQUE: "c.1"}, Wants(clique_id="c.1")),
        ({SHARED: "on", CLIQUE: "c.1"}, Wants(shared=Shared("c.1"), clique_id="c.1")),
        (
            {SHARED: "on", CLIQUE: "c.1", CD: "u1"},
            Wants(domain=Assignment("u1", "c.1"), shared=Shared("c.1"), clique_id="c.1"),
        ),
        ({CD: "u1", CLIQUE: "c.1"}, Wants(domain=Assignment("u1", "c.1"), clique_id="c.1")),
    ],
    ids=["none", "no-clique", "not-on", "shared", "both", "domain"],
)
def test_wants_of_a_node(node_labels: dict[str, str] | None, wanted: Wants) -> None:
    assert labels.wants_of(node_labels) == wanted


def test_a_node_marked_by_annotation_asks_its_agent_as_a_labelled_one_does() -> None:
    """decision 0026: with ``NODE_MARK=annotation`` the plugin writes the CD mark as an
    annotation; the agent serves the CD all the same, and the label wins if both are set."""
    from lightkube.models.core_v1 import Node
    from lightkube.models.meta_v1 import ObjectMeta

    node = Node(metadata=ObjectMeta(labels={CLIQUE: "c.1"}, annotations={CD: "u1"}))
    assert labels.wants_of(labels.node_labels(node)).domain == Assignment(
        domain_uid="u1", clique_id="c.1"
    )
    both = Node(metadata=ObjectMeta(labels={CD: "u1"}, annotations={CD: "u9"}))
    assert labels.wants_of(labels.node_labels(both)).domain == Assignment(
        domain_uid="u1", clique_id=""
    )
    assert labels.node_labels(None) == {}
