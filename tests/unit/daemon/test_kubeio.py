"""kubeio.version: an object's resourceVersion, read without decoding its metadata."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube.models.meta_v1 import ObjectMeta

from compute_domains.api.clique import ComputeDomainCliqueResource
from compute_domains.daemon import kubeio


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (ComputeDomainCliqueResource(metadata={"name": "c", "resourceVersion": "812"}), 812),
        (ComputeDomainCliqueResource(metadata=ObjectMeta(name="c", resourceVersion="9")), 9),
        (ComputeDomainCliqueResource(metadata={"name": "c"}), None),
        (ComputeDomainCliqueResource(metadata={"resourceVersion": "not-a-revision"}), None),
        (ComputeDomainCliqueResource(), None),
        ({"metadata": {"resourceVersion": "3"}}, 3),
    ],
)
def test_version(obj: Any, expected: int | None) -> None:
    assert kubeio.version(obj) == expected


def test_version_does_not_decode_managed_fields() -> None:
    # Malformed managedFields would fail ObjectMeta.from_dict; version never touches them.
    obj = ComputeDomainCliqueResource(
        metadata={"resourceVersion": "5", "managedFields": [{"time": "not a time"}]}
    )
    assert kubeio.version(obj) == 5
