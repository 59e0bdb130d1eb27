"""Warm spares in the controller: selector parsing and matching, the label plan, the condition."""

from __future__ import annotations

import pytest

from compute_domains.api import conditions, names
from compute_domains.controller import labelselector, warm

UID, OTHER = "cd-warm", "cd-other"
ZONE = "nvidia.com/gpu.clusteruuid"


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        (f"{ZONE} in (uuid-a,uuid-b)", {ZONE: "uuid-b"}, True),
        (f"{ZONE} in (uuid-a,uuid-b)", {ZONE: "uuid-c"}, False),
        (f"{ZONE} in (uuid-a,uuid-b)", {}, False),
        (f"{ZONE} notin (uuid-a)", {}, True),
        (f"{ZONE} notin (uuid-a)", {ZONE: "uuid-a"}, False),
        ("spare=true", {"spare": "true"}, True),
        ("spare==true", {"spare": "false"}, False),
        ("spare!=true", {}, True),
        ("spare!=true", {"spare": "true"}, False),
        ("spare", {"spare": ""}, True),
        ("!spare", {"spare": ""}, False),
        ("!spare", {"x": "y"}, True),
        ("spare=", {"spare": ""}, True),
        ("rank>3", {"rank": "4"}, True),
        ("rank>3", {"rank": "3"}, False),
        ("rank<3", {"rank": "x"}, False),
        (f"spare=true, {ZONE} in (a), !held", {"spare": "true", ZONE: "a"}, True),
        (f"spare=true, {ZONE} in (a), !held", {"spare": "true", ZONE: "a", "held": "1"}, False),
        ("kubernetes.io/hostname in (n1, n2 ,n3)", {"kubernetes.io/hostname": "n3"}, True),
    ],
)
def test_selectors_match_as_kubernetes_does(
    text: str, labels: dict[str, str], expected: bool
) -> None:
    assert labelselector.parse(text).matches(labels) is expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty selector"),
        ("   ", "empty selector"),
        ("a in b", r"expected '\('"),
        ("a in (b", r"expected '\)'"),
        ("a in (b c)", "expected ',' or '\\)'"),
        ("a b", "expected an operator"),
        ("a=b c", "expected ',' between"),
        ("a=b,", "expected a label key, found the end"),
        ("=b", "expected a label key"),
        ("a=b!", "expected ',' between"),
        ("-bad=x", "invalid label key"),
        ("Bad_Prefix!/x=1", "expected an operator|invalid label key"),
        ("a/b/c=1", "invalid label key"),
        ("a=" + "v" * 64, "invalid label value"),
        ("a>x", "expected an integer"),
    ],
)
def test_bad_selectors_say_why(text: str, why: str) -> None:
    with pytest.raises(labelselector.SelectorError, match=why):
        labelselector.parse(text)


def _node(name: str, **labels: str) -> tuple[str, dict[str, str]]:
    return name, {"rack": name[0], **labels}


def test_plan_labels_selected_free_nodes_and_skips_those_another_cd_has() -> None:
    nodes = [
        _node("a1"),
        _node("a2", **{names.WARM_FOR_LABEL: UID}),
        _node("a3", **{names.WARM_FOR_LABEL: OTHER}),
        _node("a4", **{names.COMPUTE_DOMAIN_LABEL: OTHER}),
        _node("a5", **{names.COMPUTE_DOMAIN_LABEL: UID}),
        _node("b1"),
        _node("b2", **{names.WARM_FOR_LABEL: UID}),
    ]
    p = warm.plan(UID, "rack=a", nodes)
    assert p.active and not p.error
    assert p.label == ("a1", "a5")
    assert p.unlabel == ("b2",)  # ours but no longer selected
    assert p.warm == ("a1", "a2", "a5")
    assert p.skipped == {"a3": OTHER, "a4": OTHER}
    cond = warm.condition(p, 3)
    assert cond is not None
    assert (cond.type, cond.status, cond.reason) == ("WarmNodes", "False", "NodesTaken")
    assert cond.message == (
        "3 node(s) warm: a1, a2, a5; skipped, taken by another ComputeDomain: "
        f"a3 (ComputeDomain {OTHER}), a4 (ComputeDomain {OTHER})"
    )
    assert cond.observed_generation == 3


def test_a_warm_node_another_cd_took_meanwhile_loses_our_label() -> None:
    nodes = [_node("a1", **{names.WARM_FOR_LABEL: UID, names.COMPUTE_DOMAIN_LABEL: OTHER})]
    p = warm.plan(UID, "rack=a", nodes)
    assert p.unlabel == ("a1",) and p.label == () and p.warm == ()
    assert p.skipped == {"a1": OTHER}


def test_without_the_annotation_every_label_of_ours_goes_and_no_condition() -> None:
    nodes = [
        _node("a1", **{names.WARM_FOR_LABEL: UID}),
        _node("a2", **{names.WARM_FOR_LABEL: OTHER}),
    ]
    p = warm.plan(UID, None, nodes)
    assert p.unlabel == ("a1",) and p.label == () and not p.active
    assert warm.condition(p, 1) is None


def test_a_bad_selector_labels_nothing_removes_nothing_and_says_why() -> None:
    nodes = [_node("a1"), _node("a2", **{names.WARM_FOR_LABEL: UID})]
    p = warm.plan(UID, "rack in a", nodes)
    assert p.label == () and p.unlabel == ()
    assert p.error.startswith(f"annotation {names.WARM_NODES_ANNOTATION}: expected '('")
    cond = warm.condition(p, 1)
    assert cond is not None
    assert (cond.status, cond.reason) == (conditions.FALSE, "InvalidSelector")
    assert cond.message.endswith("; no node labelled")


def test_all_selected_warm_is_true() -> None:
    cond = warm.condition(warm.plan(UID, "rack=a", [_node("a1"), _node("b1")]), 1)
    assert cond is not None
    assert (cond.status, cond.reason, cond.message) == (
        "True",
        "AllSelectedWarm",
        "1 node(s) warm: a1",
    )
