"""The node's CD mark in its two forms (``api.nodemark``): what every reader sees, and the
patches the plugin writes."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube.models.meta_v1 import ObjectMeta

from compute_domains.api import names, nodemark

KEY = names.COMPUTE_DOMAIN_LABEL


@pytest.mark.parametrize(
    ("labels", "annotations", "found"),
    [
        ({}, {}, ""),
        ({KEY: "cd-a"}, {}, "cd-a"),
        ({}, {KEY: "cd-a"}, "cd-a"),
        ({KEY: "cd-a"}, {KEY: "cd-b"}, "cd-a"),  # the label wins: only between a switch and a write
        ({"other": "x"}, {"compute-domains/channel.cd-c": "3"}, ""),
    ],
)
def test_domain_of_reads_either_form_of_objects_and_dicts(
    labels: dict[str, str], annotations: dict[str, str], found: str
) -> None:
    meta = ObjectMeta(name="n1", labels=labels or None, annotations=annotations or None)
    assert nodemark.domain_of(meta) == found
    as_dict: dict[str, Any] = {"name": "n1", "labels": labels, "annotations": annotations}
    assert nodemark.domain_of(as_dict) == found
    assert nodemark.domain_of(None) == ""


def test_effective_labels_carry_an_annotation_mark_as_a_label() -> None:
    meta = ObjectMeta(labels={"a": "1"}, annotations={KEY: "cd-a", "b": "2"})
    assert nodemark.effective_labels(meta) == {"a": "1", KEY: "cd-a"}
    # Only the mark is carried over; the labels themselves are never changed.
    assert meta.labels == {"a": "1"}
    both = ObjectMeta(labels={KEY: "cd-a"}, annotations={KEY: "cd-b"})
    assert nodemark.effective_labels(both) == {KEY: "cd-a"}
    assert nodemark.effective_labels(None) == {}


def test_write_patch_sets_one_form_and_clears_both() -> None:
    assert nodemark.write_patch(nodemark.Form.LABEL, "cd-a", "7") == {
        "metadata": {"resourceVersion": "7", "labels": {KEY: "cd-a"}}
    }
    assert nodemark.write_patch(nodemark.Form.ANNOTATION, "cd-a", "7") == {
        "metadata": {"resourceVersion": "7", "annotations": {KEY: "cd-a"}}
    }
    for form in nodemark.Form:
        assert nodemark.write_patch(form, None, "8") == {
            "metadata": {"resourceVersion": "8", "labels": {KEY: None}, "annotations": {KEY: None}}
        }


def test_parse_form_names_the_allowed_forms() -> None:
    assert nodemark.parse_form("annotation") is nodemark.Form.ANNOTATION
    with pytest.raises(ValueError, match=r"node mark 'taint' is not one of label, annotation"):
        nodemark.parse_form("taint")
