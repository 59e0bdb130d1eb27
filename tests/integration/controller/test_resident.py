"""With resident IMEX agents (``imex_agents="resident"``) the controller makes no per-CD daemons.

A ComputeDomain gets its finalizer, its workload template and a status, but neither a DaemonSet
nor a daemon ResourceClaimTemplate: the resident agent on each labelled node serves it. The
default (``perComputeDomain``) creating both is ``test_lifecycle``'s subject.
"""

from __future__ import annotations

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.resource_v1 import ResourceClaimTemplate

from compute_domains.api import names
from compute_domains.api.computedomain import ComputeDomainResource
from tests.integration.controller import objects
from tests.integration.controller.conftest import StartController
from tests.integration.helpers import wait_for


async def test_resident_agents_mean_no_daemonset_and_no_daemon_template(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller(imex_agents="resident")
    cd = await objects.create_cd(client, "cd-r", user_ns, "cd-r-channel")
    uid = cd.metadata.uid
    await wait_for(
        client, ComputeDomainResource, "cd-r", lambda c: bool(c.get("status")), namespace=user_ns
    )
    # The workload template is made after the daemon objects in the same pass, so once it
    # exists the pass that would have made them has run.
    await wait_for(client, ResourceClaimTemplate, "cd-r-channel", lambda t: True, namespace=user_ns)
    selector = {names.COMPUTE_DOMAIN_LABEL: uid}
    daemonsets = [d async for d in client.list(DaemonSet, namespace=driver_ns, labels=selector)]
    templates = [
        t async for t in client.list(ResourceClaimTemplate, namespace=driver_ns, labels=selector)
    ]
    assert daemonsets == []
    assert templates == []
