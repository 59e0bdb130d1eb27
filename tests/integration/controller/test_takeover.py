"""A daemon DaemonSet that NVIDIA's controller made is replaced by ours; its pods run on.

After the switch from NVIDIA's chart (docs/upgrade.md, docs/decisions/0021), our controller
finds the CD's DaemonSet with NVIDIA's pod template (its container runs
``compute-domain-daemon``). It deletes it with orphan propagation and creates ours under the same
name with the ``OnDelete`` update strategy; the real DaemonSet controller adopts the running pod,
which is never deleted. A DaemonSet of our own is left as it is.
"""

from __future__ import annotations

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from compute_domains.api import names
from tests.integration.controller import objects
from tests.integration.controller.conftest import StartController
from tests.integration.helpers import wait_for

NODE = "takeover-n0"


def _nvidias_daemonset(ns: str, uid: str) -> DaemonSet:
    """The shape NVIDIA's v25.12 controller gives a CD's DaemonSet (what matters here: name,
    label, selector, finalizer and the program its container runs), written by hand."""
    labels = {names.COMPUTE_DOMAIN_LABEL: uid}
    container = {
        "name": "compute-domain-daemon",
        "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0",
        "command": ["compute-domain-daemon", "-v", "$(LOG_VERBOSITY)", "run"],
    }
    return DaemonSet.from_dict(
        {
            "metadata": {
                "name": names.daemon_object_name(uid),
                "namespace": ns,
                "labels": labels,
                "finalizers": [names.FINALIZER],
            },
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": labels,
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [container],
                    },
                },
            },
        }
    )


def _owner(pod: Pod) -> str:
    refs = pod.metadata.ownerReferences or []  # type: ignore[union-attr]
    return next((str(r.uid) for r in refs if r.controller), "")


async def test_nvidias_daemonset_is_replaced_and_its_running_pod_adopted(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    cd = await objects.create_cd(client, "cd-nv", user_ns, "cd-nv-channel")
    uid = cd.metadata.uid
    name = names.daemon_object_name(uid)
    async with objects.nodes(client, NODE):
        await client.patch(
            Node,
            NODE,
            {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: uid}}},
            patch_type=PatchType.MERGE,
        )
        old = await client.create(_nvidias_daemonset(driver_ns, uid))
        # NVIDIA's DaemonSet runs its pod on the labelled node (the real DaemonSet controller).
        await wait_for(
            client,
            DaemonSet,
            name,
            lambda d: d.status is not None and d.status.currentNumberScheduled == 1,
            namespace=driver_ns,
        )
        pods = [
            p
            async for p in client.list(
                Pod, namespace=driver_ns, labels={names.COMPUTE_DOMAIN_LABEL: uid}
            )
        ]
        assert len(pods) == 1 and _owner(pods[0]) == old.metadata.uid, pods
        pod_uid, pod_name = pods[0].metadata.uid, pods[0].metadata.name

        await start_controller()
        ours = await wait_for(
            client,
            DaemonSet,
            name,
            lambda d: d.metadata.uid != old.metadata.uid,
            namespace=driver_ns,
        )
        assert ours.spec.template.spec.containers[0].command == ["cdctl", "daemon", "run"]
        assert ours.spec.updateStrategy.type == "OnDelete"
        # Its daemons join the IMEX domain of NVIDIA's, whose node map has NVIDIA's names.
        env = {e.name: e.value for e in ours.spec.template.spec.containers[0].env}
        assert env["IMEX_PEER_NAMES"] == "nvidia"
        adopted = await wait_for(
            client, Pod, pod_name, lambda p: _owner(p) == ours.metadata.uid, namespace=driver_ns
        )
        assert adopted.metadata.uid == pod_uid and adopted.metadata.deletionTimestamp is None
        events = [
            e.message
            async for e in client.list(Event, namespace=user_ns)
            if e.reason == "DaemonSetCreated"
        ]
        assert any(f"adopts NVIDIA's running daemons, kept: {pod_name}" in m for m in events), (
            events
        )
