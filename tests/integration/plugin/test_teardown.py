"""Nothing left behind on a node: a ComputeDomain's per-node folder goes with its last claim.

The folder ``domains/<cdUID>`` holds the IMEX config the daemon writes (``imexd.cfg``,
``nodes.cfg``) and workloads read. It is removed by the unprepare of the CD's last claim on the
node, while the CD still exists: not by cleanup's periodic sweep (300 s, and only for deleted
CDs), which these tests never reach.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.api import names
from compute_domains.plugin import checkpoint
from compute_domains.sim import state
from tests.integration.helpers import wait_gone
from tests.integration.plugin import objects
from tests.integration.plugin.conftest import NODES, Namespaces, StartPlugin, node_info

pytestmark = pytest.mark.integration

NODE = NODES[0]
WORKLOAD = "ls -l /imexd; echo listed; sleep 3600"
DAEMON = "touch /imexd/imexd.cfg /imexd/nodes.cfg; echo written; sleep 3600"


async def _until(check: Callable[[], bool], timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.2)


def _entry(sim: state.SimPaths, claim_uid: str) -> checkpoint.ClaimEntry | None:
    return objects.read_checkpoint(sim, NODE).get(claim_uid)


async def _unprepared(admin: AsyncClient, sim: state.SimPaths, ns: str, pod: str) -> None:
    """Delete ``pod`` and wait until its claim is a tombstone in the node's checkpoint."""
    claim = await objects.claim_of(admin, ns, pod)
    uid = str(claim.metadata.uid)  # type: ignore[union-attr]
    await admin.delete(Pod, pod, namespace=ns, grace_period=0)
    await wait_gone(admin, Pod, pod, ns)
    await _until(
        lambda: (e := _entry(sim, uid)) is not None and e.state is checkpoint.ClaimState.UNPREPARED
    )


async def test_the_last_claim_of_a_domain_on_a_node_takes_its_folder_along(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin, plugin_sim: state.SimPaths
) -> None:
    await start_plugin(NODE)
    uid = await objects.compute_domain(admin, spaces.user, "tidy")
    await objects.ready_clique(admin, spaces.driver, uid, node_info(NODE).clique_id, [NODE])
    await objects.workload_template(admin, spaces.user, "tidy", uid)
    await objects.daemon_template(admin, spaces.driver, "daemon-tpl", uid)
    folder = plugin_sim.node_root(NODE) / "var/lib/kubelet/plugins" / names.DRIVER_NAME
    folder = folder / "domains" / uid

    await objects.pod(admin, spaces.driver, "daemon", DAEMON, template="daemon-tpl", node=NODE)
    await objects.log_containing(admin, spaces.driver, "daemon", "written")
    await objects.pod(admin, spaces.user, "work", WORKLOAD, template="tidy", node=NODE)
    log = await objects.log_containing(admin, spaces.user, "work", "listed")
    assert "imexd.cfg" in log and "nodes.cfg" in log, log

    # The workload ends first (the node label goes, so the daemon would leave next).
    await _unprepared(admin, plugin_sim, spaces.user, "work")
    assert await objects.node_label(admin, NODE) is None
    assert (folder / "imexd.cfg").exists(), "the daemon's claim still uses the folder"

    # The daemon's claim is the CD's last one here: its unprepare removes the folder.
    await _unprepared(admin, plugin_sim, spaces.driver, "daemon")
    assert not folder.exists(), sorted(p.name for p in folder.iterdir())
