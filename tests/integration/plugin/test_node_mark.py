"""The node's CD mark as an annotation (``NODE_MARK=annotation``, decision 0026) against the real
API server: the plugin writes and removes the annotation, never the label; either form of another
CD's mark refuses a claim with the same clear error; the scheduler still sees the holder."""

from __future__ import annotations

import asyncio

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.api import names, nodemark
from compute_domains.plugin.config import RetrySettings
from tests.integration.helpers import wait_for, wait_gone
from tests.integration.plugin import objects
from tests.integration.plugin.conftest import NODES, Namespaces, StartPlugin, node_info

pytestmark = pytest.mark.integration

NODE_A, NODE_B = NODES
LS = "ls -l /dev/nvidia-caps-imex-channels; sleep 3600"
KEY = names.COMPUTE_DOMAIN_LABEL


async def _cd(admin: AsyncClient, ns: Namespaces, name: str) -> str:
    uid = await objects.compute_domain(admin, ns.user, name)
    await objects.ready_clique(admin, ns.driver, uid, node_info(NODE_A).clique_id, NODES)
    await objects.workload_template(admin, ns.user, name, uid)
    return uid


def _forms(node: Node) -> tuple[str | None, str | None]:
    meta = node.metadata
    assert meta is not None
    return (meta.labels or {}).get(KEY), (meta.annotations or {}).get(KEY)


async def test_the_plugin_marks_by_annotation_and_removes_it_with_the_last_claim(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin
) -> None:
    await start_plugin(NODE_A, node_mark=nodemark.Form.ANNOTATION)
    uid = await _cd(admin, spaces, "marked")
    for name in ("w0", "w1"):
        await objects.pod(admin, spaces.user, name, LS, template="marked", node=NODE_A)
    for name in ("w0", "w1"):
        await objects.running(admin, spaces.user, name)
        await objects.log_containing(admin, spaces.user, name, "channel0")
    assert _forms(await admin.get(Node, NODE_A)) == (None, uid)

    await admin.delete(Pod, "w0", namespace=spaces.user, grace_period=0)
    await wait_gone(admin, Pod, "w0", spaces.user)
    assert _forms(await admin.get(Node, NODE_A)) == (None, uid), "w1 still needs the node"
    await admin.delete(Pod, "w1", namespace=spaces.user, grace_period=0)
    await wait_for(admin, Node, NODE_A, lambda n: _forms(n) == (None, None), timeout=60)


@pytest.mark.parametrize("form", list(nodemark.Form))
async def test_another_cds_annotation_refuses_a_claim_in_either_form(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin, form: nodemark.Form
) -> None:
    """A node marked by annotation for another CD is held, whichever form this plugin writes
    (a cluster switched between forms reads both)."""
    retry = RetrySettings(budget_s=3.0, readiness_timeout_s=2.0)
    await start_plugin(NODE_A, retry=retry, node_mark=form)
    await _cd(admin, spaces, "late")
    await admin.patch(Node, NODE_A, {"metadata": {"annotations": {KEY: "someone-else"}}})
    try:
        await objects.pod(admin, spaces.user, "w", LS, template="late", node=NODE_A)

        refused = objects.event_containing(admin, spaces.user, "w", "held by another ComputeDomain")
        message = await asyncio.wait_for(refused, 60)
        assert f"(annotation {KEY}=someone-else)" in message, message
        assert _forms(await admin.get(Node, NODE_A)) == (None, "someone-else")
    finally:
        await admin.patch(Node, NODE_A, {"metadata": {"annotations": {KEY: None}}})
