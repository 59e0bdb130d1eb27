"""``cdctl controller run`` as the chart runs it: configured by env, stopped by SIGTERM.

The process must reconcile, and on SIGTERM step down gracefully: release its Lease (so a
standby takes over at once) and exit 0.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from lightkube import AsyncClient
from lightkube.resources.coordination_v1 import Lease

from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.sim import state
from tests.integration.controller import objects
from tests.integration.controller.conftest import IMAGE
from tests.integration.helpers import wait_for

LEASE = "cli-controller"


async def test_run_reconciles_and_stops_gracefully_on_sigterm(
    client: AsyncClient, sim: state.SimPaths, driver_ns: str, user_ns: str, tmp_path: Path
) -> None:
    cdctl = Path(sys.executable).with_name("cdctl")
    env = {
        **os.environ,
        "KUBECONFIG": str(sim.kubeconfig),
        "POD_NAMESPACE": driver_ns,
        "POD_NAME": "cli-test",
        "IMAGE_NAME": IMAGE,
        "LEADER_ELECTION_ENABLED": "true",
        "LEADER_ELECTION_LEASE_LOCK_NAME": LEASE,
        "METRICS_PORT": "0",
        "LOG_FORMAT": "json",
    }
    log = tmp_path / "controller.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            str(cdctl), "controller", "run", env=env, stdout=out, stderr=out
        )
    try:
        await objects.create_cd(client, "cd-cli", user_ns, "cd-cli-channel")
        await wait_for(
            client,
            ComputeDomainResource,
            "cd-cli",
            lambda c: bool(c.get("status")),
            namespace=user_ns,
            timeout=90,
        )
        lease = await client.get(Lease, LEASE, namespace=driver_ns)
        assert (lease.spec.holderIdentity or "").startswith("cli-test-")

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0, log.read_text()[-3000:]
        released = await client.get(Lease, LEASE, namespace=driver_ns)
        assert not released.spec.holderIdentity
        text = log.read_text()
        assert '"msg": "controller starting' in text and "released lease" in text
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
