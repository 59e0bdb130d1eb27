"""The per-clique scope's Node write (``plugin.shared``) from the Node the plugin's watch saw,
against the real API server (issue 26 point 6: a formation's attach is one write).

The plugin's Node watch hands ``Shared`` every state of its Node (``node_seen``). The attach
then writes with that state's resourceVersion instead of reading the Node first; a stale state
costs a conflict and a fresh read, and a decision not to write (a per-domain CD's label, or
every mark already there) is only ever made on a fresh read.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node

from compute_domains.api import names, sharedimex
from compute_domains.plugin import computedomain, shared
from tests.integration.plugin.conftest import Namespaces
from tests.integration.plugin.test_registry import _cd

pytestmark = pytest.mark.integration


class _Counting:
    """A client that records the API calls made through it (by method name, in order)."""

    def __init__(self, client: AsyncClient) -> None:
        self._wrapped = client
        self.order: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name in ("get", "list", "watch", "patch", "create", "replace"):
            self.order.append(name)
        return getattr(self._wrapped, name)

    def reads_only_after_conflicts(self) -> bool:
        """Nothing but patches and gets, a patch first, and one fresh read per refused patch
        (the control plane's own controllers may write a fresh Node too: each such write costs
        one more conflict and read, never a read before the first write)."""
        kinds = set(self.order) <= {"patch", "get"}
        first = bool(self.order) and self.order[0] == "patch"
        alternating = all(a != b for a, b in zip(self.order, self.order[1:], strict=False))
        return kinds and first and alternating and self.order[-1] == "patch"


@pytest.fixture
async def ghost(admin: AsyncClient) -> AsyncIterator[str]:
    """A Node object with no kubelet behind it (only its metadata matters here)."""
    name = f"ghost-{uuid.uuid4().hex[:8]}"
    await admin.create(Node(metadata=ObjectMeta(name=name)))
    yield name
    await admin.delete(Node, name)


def _side(admin: AsyncClient, node: str, spaces: Namespaces) -> tuple[_Counting, shared.Shared]:
    counting = _Counting(admin)
    port = shared.Shared(cast(AsyncClient, counting), node=node, driver_namespace=spaces.driver)
    return counting, port


async def _marks(admin: AsyncClient, node: str) -> tuple[dict[str, int], str | None]:
    meta = (await admin.get(Node, node)).metadata
    assert meta is not None
    return sharedimex.channels(meta.annotations), (meta.labels or {}).get(
        sharedimex.SHARED_IMEX_LABEL
    )


async def test_an_attach_from_the_watched_node_is_one_write(
    admin: AsyncClient, spaces: Namespaces, ghost: str
) -> None:
    counting, port = _side(admin, ghost, spaces)
    port.node_seen(await admin.get(Node, ghost))
    cd = _cd("x")
    await port.attach(cd, 4)
    assert counting.reads_only_after_conflicts(), f"no read before the write: {counting.order}"
    assert await _marks(admin, ghost) == ({cd.uid: 4}, sharedimex.SHARED_IMEX_ON)


async def test_a_stale_watched_node_costs_a_conflict_and_loses_no_write(
    admin: AsyncClient, spaces: Namespaces, ghost: str
) -> None:
    counting, port = _side(admin, ghost, spaces)
    port.node_seen(await admin.get(Node, ghost))
    other = {"metadata": {"annotations": {"someone.else/mark": "kept"}}}
    await admin.patch(Node, ghost, other)  # after the watch's state: its version is old
    cd = _cd("x")
    await port.attach(cd, 5)
    assert counting.order[:2] == ["patch", "get"], f"conflict, fresh read: {counting.order}"
    assert counting.reads_only_after_conflicts(), f"then the write: {counting.order}"
    meta = (await admin.get(Node, ghost)).metadata
    assert meta is not None and (meta.annotations or {}).get("someone.else/mark") == "kept"
    assert await _marks(admin, ghost) == ({cd.uid: 5}, sharedimex.SHARED_IMEX_ON)


async def test_nothing_is_skipped_or_refused_on_the_watched_node_alone(
    admin: AsyncClient, spaces: Namespaces, ghost: str
) -> None:
    """The watch may lag behind our own detach (every mark seemingly there) or behind the
    removal of a per-domain CD's label (seemingly held): both are decided on a fresh read."""
    cd = _cd("x")
    _, port = _side(admin, ghost, spaces)
    await port.attach(cd, 6)
    port.node_seen(await admin.get(Node, ghost))  # the watch saw the marks ...
    await port.detach(cd.uid)  # ... and not yet their removal
    await port.attach(cd, 6)
    assert await _marks(admin, ghost) == ({cd.uid: 6}, sharedimex.SHARED_IMEX_ON)

    held = {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: "per-domain-cd"}}}
    await admin.patch(Node, ghost, held)
    port.node_seen(await admin.get(Node, ghost))  # the watch saw the label ...
    with pytest.raises(computedomain.NodeHeldError):
        await port.attach(_cd("y"), 7)  # (still there: refused)
    await admin.patch(Node, ghost, {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: None}}})
    y = _cd("y")
    await port.attach(y, 7)  # ... not yet its removal: written
    assert (await _marks(admin, ghost))[0] == {cd.uid: 6, y.uid: 7}
