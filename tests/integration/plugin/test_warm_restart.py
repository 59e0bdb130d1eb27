"""A warm node's plugin restarts after its workload died with the node (issue 26 point 4).

With resident agents, the node's agent serves the CD of the node's warm-spare label with no claim
on the node, and writes its IMEX config into the CD's folder ``domains/<CD UID>``. A node that
stops and starts again restarts its agent and its plugin at once; the plugin's first cleanup
unprepares the claim of the pod that died with the node. That unprepare must leave the folder
alone: the agent has just written its config there, and its IMEX cannot start without it (the
e2e ``test_two_domain_64plus8.py`` per domain with resident agents: the healed nodes stayed
NotReady for good).
"""

from __future__ import annotations

import contextlib
import logging

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.api import names
from tests.integration.helpers import wait_gone
from tests.integration.plugin import objects
from tests.integration.plugin.conftest import (
    NODES,
    Namespaces,
    StartPlugin,
    node_info,
)

pytestmark = pytest.mark.integration

NODE_A = NODES[0]


async def _warm(admin: AsyncClient, node: str, domain_uid: str | None) -> None:
    """Set (or, with None, remove) the controller's warm-spare label on ``node``."""
    await admin.patch(Node, node, {"metadata": {"labels": {names.WARM_FOR_LABEL: domain_uid}}})


async def test_a_restart_on_a_warm_node_keeps_the_folder_of_its_cd(
    admin: AsyncClient,
    spaces: Namespaces,
    start_plugin: StartPlugin,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="compute_domains.plugin")
    running = await start_plugin(NODE_A)
    uid = await objects.compute_domain(admin, spaces.user, "warm")
    await objects.ready_clique(admin, spaces.driver, uid, node_info(NODE_A).clique_id, [NODE_A])
    await objects.workload_template(admin, spaces.user, "warm", uid)
    await _warm(admin, NODE_A, uid)
    try:
        await objects.pod(admin, spaces.user, "w", "sleep 3600", template="warm", node=NODE_A)
        await objects.running(admin, spaces.user, "w")
        paths = running.settings.paths
        folder = paths.local(paths.domains_dir / uid)
        agent_config = folder / "imexd.agent.cfg"
        agent_config.write_text("# the resident agent's IMEX config\n")

        # The node dies with the pod on it: no plugin to unprepare, the pod force-deleted and
        # its claim gone; then the node starts again, the agent has rewritten its config.
        await running.stop()
        claim = await objects.claim_of(admin, spaces.user, "w")
        claim_name = str(claim.metadata.name)  # type: ignore[union-attr]
        await admin.delete(Pod, "w", namespace=spaces.user, grace_period=0)
        with contextlib.suppress(ApiError):
            await admin.delete(ResourceClaim, claim_name, namespace=spaces.user)
        await wait_gone(admin, ResourceClaim, claim_name, spaces.user)
        caplog.clear()
        await start_plugin(NODE_A)

        assert any(
            f"unprepared stale claim: {spaces.user}/{claim_name}" in m for m in caplog.messages
        ), caplog.messages
        assert await objects.node_label(admin, NODE_A) is None, "the claim's CD label goes"
        assert agent_config.exists(), "the folder of the CD the node is warm for was removed"
    finally:
        await _warm(admin, NODE_A, None)
