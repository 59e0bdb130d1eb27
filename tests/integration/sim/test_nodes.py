"""Simulated nodes behave like kubelets on the real control plane (issue: simulated nodes).

Covers: a Deployment of ``sh -c`` pods runs, restarts a failing container and is torn down;
a pod with a claim of the test DRA driver gets the CDI env and device node, and its claim is
unprepared after deletion, also when the pod was deleted while its kubelet was down; probes
gate readiness; a stopped node turns NotReady and the real node-lifecycle controller evicts
its pods, and every process its containers started ends with it; a rebooted node runs each
container once, prepares its pods' claims again and publishes their new addresses; the
control-plane node runs only pods that tolerate its taint.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaimTemplate

from compute_domains.api import names
from compute_domains.sim import state, toolchain, topology
from compute_domains.sim.kubelet import nodestatus
from tests.drivers.testdriver import DRIVER, TestDriver
from tests.integration.helpers import wait_for
from tests.integration.sim.conftest import node_op

NODE_A, NODE_B = "gb200-r0-n00", "gb200-r0-n01"
CompletedText = subprocess.CompletedProcess[str]


async def _logs(
    client: AsyncClient, pod: str, ns: str, until: str = "", timeout: float = 30
) -> str:
    """The pod's log, following it until ``until`` shows up (a container prints when it runs)."""
    seen: list[str] = []

    async def follow() -> None:
        async for line in client.log(pod, namespace=ns, follow=True):
            seen.append(line)
            if until in "".join(seen):
                return

    await asyncio.wait_for(follow(), timeout)
    return "".join(seen)


def _plain_pod(name: str, ns: str, command: list[str], node: str | None = None) -> Pod:
    """A one-container pod running ``command``, pinned to ``node`` when given."""
    spec: dict[str, object] = {
        "containers": [{"name": "c", "image": "debian:12", "command": command}]
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return Pod.from_dict({"metadata": {"name": name, "namespace": ns}, "spec": spec})


def _running_ready(p: Pod) -> bool:
    return bool(
        p.status
        and p.status.phase == "Running"
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    )


async def _pods(client: AsyncClient, ns: str, app: str) -> list[Pod]:
    return [p async for p in client.list(Pod, namespace=ns, labels={"app": app})]


async def _wait_pods(
    client: AsyncClient, ns: str, app: str, count: int, ok: object, timeout: float = 90
) -> list[Pod]:
    async def poll() -> list[Pod]:
        watch = client.watch(Pod, namespace=ns, labels={"app": app})
        async with contextlib.aclosing(watch) as events:  # closed on return, not when collected
            async for _ in events:
                pods = await _pods(client, ns, app)
                if len(pods) == count and all(ok(p) for p in pods):  # type: ignore[operator]
                    return pods
        raise AssertionError("watch ended")

    pods = await _pods(client, ns, app)
    if len(pods) == count and all(ok(p) for p in pods):  # type: ignore[operator]
        return pods
    return await asyncio.wait_for(poll(), timeout)


def _deployment(name: str, command: str, replicas: int = 2) -> Deployment:
    return Deployment.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "terminationGracePeriodSeconds": 5,
                        "containers": [
                            {"name": "c", "image": "debian:12", "command": ["sh", "-c", command]}
                        ],
                    },
                },
            },
        }
    )


async def test_deployment_runs_restarts_and_tears_down(admin: AsyncClient, ns: str) -> None:
    await admin.create(_deployment("ok", "echo started on $(hostname); sleep 3600"), namespace=ns)
    await admin.create(_deployment("bad", "echo failing; exit 3", replicas=1), namespace=ns)
    pods = await _wait_pods(admin, ns, "ok", 2, _running_ready)
    assert {p.status.podIP for p in pods}.isdisjoint({None, ""})  # type: ignore[union-attr]
    name = pods[0].metadata.name  # type: ignore[union-attr]
    assert f"started on {name}" in await _logs(admin, str(name), ns, f"started on {name}")

    def crashlooping(p: Pod) -> bool:
        cs = (p.status.containerStatuses or []) if p.status else []
        return (
            bool(cs)
            and cs[0].restartCount >= 1
            and (
                cs[0].lastState is not None
                and cs[0].lastState.terminated is not None
                and cs[0].lastState.terminated.exitCode == 3
            )
        )

    await _wait_pods(admin, ns, "bad", 1, crashlooping, timeout=120)

    await admin.delete(Deployment, "ok", namespace=ns)
    await _wait_pods(admin, ns, "ok", 0, lambda p: True)


async def test_output_written_before_ready_is_in_the_log_once_ready(
    admin: AsyncClient, ns: str
) -> None:
    """NVIDIA's channel-injection test: ``kubectl wait --for=condition=Ready`` then ``kubectl
    logs`` must show what the container printed first. The pod used to turn Ready while the
    container's view was still being built (~0.5 s before its command ran), with an empty log."""
    await admin.create(
        _plain_pod("early", ns, ["sh", "-c", "echo written-first; exec sleep 3600"], NODE_A)
    )
    await wait_for(admin, Pod, "early", _running_ready, namespace=ns, timeout=60)
    logs = "".join([line async for line in admin.log("early", namespace=ns)])
    assert "written-first" in logs


async def test_following_a_log_ends_with_the_deleted_pod(admin: AsyncClient, ns: str) -> None:
    """``kubectl logs -f`` of a daemon pod, then the pod is deleted: the follower gets what the
    container wrote while it stopped, then ends (NVIDIA's test greps the daemon's last words)."""
    script = "trap 'echo last-words; exit 0' TERM; echo started; sleep 3600 & wait"
    pod = _plain_pod("followed", ns, ["sh", "-c", script], NODE_A)
    assert pod.spec is not None
    pod.spec.terminationGracePeriodSeconds = 10
    await admin.create(pod)
    await wait_for(admin, Pod, "followed", _running_ready, namespace=ns, timeout=60)
    lines: list[str] = []
    started = asyncio.Event()

    async def follow() -> None:
        async for line in admin.log("followed", namespace=ns, follow=True):
            lines.append(line)
            if "started" in line:
                started.set()

    follower = asyncio.create_task(follow())
    try:
        await asyncio.wait_for(started.wait(), 30)
        await admin.delete(Pod, "followed", namespace=ns)
        await asyncio.wait_for(follower, 30)  # it ends by itself
    finally:
        follower.cancel()
    assert "".join(lines) == "started\nlast-words\n"


def _kubectl(sim: state.SimPaths, bin_dir: Path, *args: str, stdin: str = "") -> CompletedText:
    """Run the real kubectl 1.34 against the sim (its exec speaks WebSockets to the API server,
    which opens SPDY streams to the kubelet)."""
    return subprocess.run(
        [str(bin_dir / "kubectl"), f"--kubeconfig={sim.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_kubectl_exec_runs_in_the_container(
    admin: AsyncClient, ns: str, nodes_sim: state.SimPaths, toolset: toolchain.Toolset
) -> None:
    """``kubectl exec`` used to fail (``unable to upgrade connection``). It runs the command in
    the container's view (its private /tmp, its hostname), passes stdin, stdout and stderr, and
    exits with the command's exit code."""
    script = "echo inside > /tmp/mark; exec sleep 3600"
    await admin.create(_plain_pod("execd", ns, ["sh", "-c", script], NODE_A))
    await wait_for(admin, Pod, "execd", _running_ready, namespace=ns, timeout=60)
    base = ("exec", "-n", ns, "execd", "-c", "c")
    inside = "cat /tmp/mark; hostname; echo to-stderr >&2; exit 3"
    ran = await asyncio.to_thread(
        _kubectl, nodes_sim, toolset.bin_dir, *base, "--", "sh", "-c", inside
    )
    assert (ran.returncode, ran.stdout) == (3, "inside\nexecd\n"), ran
    assert "to-stderr" in ran.stderr, ran
    fed = await asyncio.to_thread(
        _kubectl,
        nodes_sim,
        toolset.bin_dir,
        *base[:-2],
        "-i",
        "--",
        "tr",
        "a-z",
        "A-Z",
        stdin="piped\n",
    )
    assert (fed.returncode, fed.stdout) == (0, "PIPED\n"), fed


async def test_probe_gates_readiness(admin: AsyncClient, ns: str) -> None:
    await admin.create(
        Pod.from_dict(
            {
                "metadata": {"name": "probed", "namespace": ns},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "debian:12",
                            "command": ["sh", "-c", "sleep 4; touch /tmp/ready; sleep 3600"],
                            "readinessProbe": {
                                "exec": {"command": ["test", "-f", "/tmp/ready"]},
                                "periodSeconds": 1,
                                "failureThreshold": 1,
                            },
                        }
                    ]
                },
            }
        )
    )
    running = await wait_for(
        admin,
        Pod,
        "probed",
        lambda p: bool(p.status and p.status.phase == "Running"),
        namespace=ns,
        timeout=60,
    )
    assert not _running_ready(running), "Ready before the readiness probe passed"
    await wait_for(admin, Pod, "probed", _running_ready, namespace=ns, timeout=60)


async def test_ready_is_restored_after_the_node_controller_marks_it_false(
    admin: AsyncClient, ns: str
) -> None:
    """A node that missed heartbeats gets its pods marked ``Ready=False`` by the node-lifecycle
    controller; once the node is back, its kubelet must put its own view back (the status
    manager's reconcile), or the pods stay NotReady forever."""
    await admin.create(_plain_pod("steady", ns, ["sleep", "3600"]))
    await wait_for(admin, Pod, "steady", _running_ready, namespace=ns, timeout=60)
    # What kube-controller-manager's MarkPodsNotReady writes for a NotReady node.
    await admin.patch(
        Pod.Status,
        "steady",
        {
            "status": {
                "conditions": [{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]
            }
        },
        namespace=ns,
    )
    pod = await wait_for(admin, Pod, "steady", _running_ready, namespace=ns, timeout=60)
    ready = next(c for c in pod.status.conditions if c.type == "Ready")  # type: ignore[union-attr]
    assert ready.reason is None, "the stale NotReady reason was kept"


async def test_a_node_registers_the_kubelets_own_labels_so_no_controller_patches_them(
    admin: AsyncClient,
) -> None:
    """A real kubelet registers its Node with the stable and the beta OS and arch labels
    (``initialNode``). Without the beta ones kube-controller-manager's node-lifecycle controller
    patches every Node once to add them, a Node label event on which kube-scheduler re-queues
    every parked pod (at 4,608 nodes those patches fell into a formation)."""
    for name in (NODE_A, NODE_B):
        node = await admin.get(Node, name)
        assert node.metadata is not None
        labels = node.metadata.labels or {}
        for key in ("os", "arch"):
            assert labels.get(f"beta.kubernetes.io/{key}") == labels.get(f"kubernetes.io/{key}")
        owners = [
            f.manager
            for f in node.metadata.managedFields or []
            if '"f:beta.kubernetes.io/os"' in str(f.fieldsV1)
            or "f:beta.kubernetes.io/os" in str(f.fieldsV1)
        ]
        assert owners and "kube-controller-manager" not in owners, owners


@pytest.fixture
async def driver(admin: AsyncClient, nodes_sim: state.SimPaths) -> AsyncIterator[TestDriver]:
    drv = TestDriver(admin, NODE_A, nodes_sim.node_root(NODE_A))
    await drv.start()
    with contextlib.suppress(ApiError):
        await admin.create(
            DeviceClass.from_dict(
                {
                    "metadata": {"name": DRIVER},
                    "spec": {
                        "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]
                    },
                }
            )
        )
    yield drv
    await drv.stop()


def _claim_pod(name: str, ns: str, node: str) -> Pod:
    return Pod.from_dict(
        {
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "terminationGracePeriodSeconds": 2,
                "containers": [
                    {
                        "name": "c",
                        "image": "debian:12",
                        "command": [
                            "sh",
                            "-c",
                            # The kubelet expands ``$(VAR)`` from the container's own env:
                            # a CDI edit's variable stays literal (the single quotes keep sh
                            # from reading it as a command substitution).
                            "echo device=$TEST_DEVICE; echo kubelet='$(TEST_DEVICE)';"
                            " ls -l /dev/test-*; sleep 3600",
                        ],
                        "resources": {"claims": [{"name": "dev"}]},
                    }
                ],
                "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "one"}],
            },
        }
    )


async def _template(admin: AsyncClient, ns: str) -> None:
    await admin.create(
        ResourceClaimTemplate.from_dict(
            {
                "metadata": {"name": "one", "namespace": ns},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [{"name": "dev", "exactly": {"deviceClassName": DRIVER}}]
                        }
                    }
                },
            }
        )
    )


async def _until(check: Callable[[], bool], timeout: float) -> None:
    """Wait for the in-process test driver to record something (it has no watch to follow)."""

    async def loop() -> None:
        while not check():
            await asyncio.sleep(0.2)

    await asyncio.wait_for(loop(), timeout)


async def _wait_registered(drv: TestDriver) -> None:
    await _until(lambda: bool(drv.registration.status), 30)


async def test_claim_gets_cdi_env_and_device_and_is_unprepared(
    admin: AsyncClient, ns: str, driver: TestDriver
) -> None:
    await _wait_registered(driver)
    await _template(admin, ns)
    await admin.create(_claim_pod("user", ns, NODE_A))
    pod = await wait_for(admin, Pod, "user", _running_ready, namespace=ns, timeout=90)
    logs = await _logs(admin, "user", ns, "/dev/test-dev-")
    assert "device=dev-" in logs
    assert "kubelet=$(TEST_DEVICE)" in logs
    assert "crw-rw-rw-" in logs and "1, 3" in logs and "/dev/test-dev-" in logs
    claim_uid = driver.prepared[-1]
    assert (driver.cdi_dir / f"test-{claim_uid}.json").exists()
    assert pod.status is not None and pod.status.resourceClaimStatuses

    await admin.delete(Pod, "user", namespace=ns)
    await _until(lambda: claim_uid in driver.unprepared, 60)
    assert not (driver.cdi_dir / f"test-{claim_uid}.json").exists()


async def test_unprepare_after_kubelet_restart(
    admin: AsyncClient, ns: str, driver: TestDriver, nodes_sim: state.SimPaths
) -> None:
    await _wait_registered(driver)
    await _template(admin, ns)
    await admin.create(_claim_pod("survivor", ns, NODE_A))
    await wait_for(admin, Pod, "survivor", _running_ready, namespace=ns, timeout=90)
    claim_uid = driver.prepared[-1]
    await asyncio.to_thread(node_op, nodes_sim, "stop", NODE_A)
    # With the kubelet down the pod cannot finish terminating: force-delete it, as people do.
    await admin.delete(Pod, "survivor", namespace=ns, grace_period=0)
    assert claim_uid not in driver.unprepared
    await asyncio.to_thread(node_op, nodes_sim, "start", NODE_A)

    await _until(lambda: claim_uid in driver.unprepared, 60)  # the kubelet's reconcile


async def test_prepare_failure_is_reported_and_retried(
    admin: AsyncClient, ns: str, driver: TestDriver
) -> None:
    await _wait_registered(driver)
    await _template(admin, ns)
    driver.fail_prepare = "device on fire"
    await admin.create(_claim_pod("unlucky", ns, NODE_A))

    async def event_seen() -> Event:
        while True:
            async for ev in admin.list(
                Event, namespace=ns, fields={"involvedObject.name": "unlucky"}
            ):
                if ev.reason == "FailedPrepareDynamicResources":
                    return ev
            await asyncio.sleep(0.5)

    ev = await asyncio.wait_for(event_seen(), 30)
    assert "NodePrepareResources failed for ResourceClaim" in str(ev.message)
    assert "device on fire" in str(ev.message)
    pod = await admin.get(Pod, "unlucky", namespace=ns)
    waiting = pod.status.containerStatuses[0].state.waiting  # type: ignore[index,union-attr]
    assert waiting is not None and waiting.reason == "ContainerCreating"
    driver.fail_prepare = ""
    await wait_for(admin, Pod, "unlucky", _running_ready, namespace=ns, timeout=60)


async def test_stopped_node_turns_not_ready_and_pods_are_evicted(
    admin: AsyncClient, ns: str, nodes_sim: state.SimPaths
) -> None:
    await admin.create(_plain_pod("victim", ns, ["sh", "-c", "sleep 3600"], NODE_B))
    await wait_for(admin, Pod, "victim", _running_ready, namespace=ns, timeout=60)
    await asyncio.to_thread(node_op, nodes_sim, "stop", NODE_B)
    try:

        def not_ready(n: Node) -> bool:
            return any(
                c.type == "Ready" and c.status != "True"
                for c in (n.status.conditions or [])
                if n.status
            )

        await wait_for(admin, Node, NODE_B, not_ready, timeout=60)
        await wait_for(
            admin,
            Pod,
            "victim",
            lambda p: p.metadata is not None and p.metadata.deletionTimestamp is not None,
            namespace=ns,
            timeout=90,
        )
    finally:
        await asyncio.to_thread(node_op, nodes_sim, "start", NODE_B)
    # the restarted kubelet finishes the eviction: the pod object goes away
    with pytest.raises(ApiError):

        async def gone() -> None:
            while True:
                await admin.get(Pod, "victim", namespace=ns)
                await asyncio.sleep(0.5)

        await asyncio.wait_for(gone(), 60)


async def test_control_plane_node_runs_only_what_tolerates_it(admin: AsyncClient, ns: str) -> None:
    """kubeadm's control-plane node: role label, ``NoSchedule`` taint, no GPU. NVIDIA's
    controller (affinity for the label, toleration for the taint) runs there; a pod without
    the toleration is refused by the real scheduler even when pinned to it."""
    cp = await admin.get(Node, topology.CONTROL_PLANE_NODE)
    assert cp.metadata is not None and cp.spec is not None and cp.status is not None
    labels = cp.metadata.labels or {}
    assert labels.get(nodestatus.CONTROL_PLANE_LABEL) == "", labels
    assert names.GPU_PRESENT_LABEL not in labels and names.GPU_CLIQUE_LABEL not in labels
    assert [(t.key, t.effect) for t in cp.spec.taints or []] == [
        (nodestatus.CONTROL_PLANE_LABEL, "NoSchedule")
    ]
    assert "nvidia.com/gpu" not in (cp.status.capacity or {})

    term = {"matchExpressions": [{"key": nodestatus.CONTROL_PLANE_LABEL, "operator": "Exists"}]}
    controller = _plain_pod("like-nvidia-controller", ns, ["sleep", "3600"]).to_dict()
    controller["spec"] |= {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        },
        "tolerations": [
            {"key": nodestatus.CONTROL_PLANE_LABEL, "operator": "Exists", "effect": "NoSchedule"}
        ],
    }
    await admin.create(Pod.from_dict(controller))
    pod = await wait_for(
        admin, Pod, "like-nvidia-controller", _running_ready, namespace=ns, timeout=60
    )
    assert pod.spec is not None and pod.spec.nodeName == topology.CONTROL_PLANE_NODE

    await admin.create(_plain_pod("intruder", ns, ["sleep", "3600"], topology.CONTROL_PLANE_NODE))

    def unschedulable(p: Pod) -> bool:
        conds = (p.status.conditions if p.status else None) or []
        return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conds)

    refused = await wait_for(admin, Pod, "intruder", unschedulable, namespace=ns, timeout=60)
    assert refused.spec is not None and not refused.spec.nodeName


def _processes_with(marker: str) -> int:
    """How many processes on this machine have ``marker`` in their command line."""
    count = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if marker.encode() in cmdline.read_bytes():
                count += 1
    return count


async def _until_count(marker: str, count: int, timeout: float = 30) -> None:
    """Wait until ``count`` processes carry ``marker`` (a container execs its command late)."""
    async with asyncio.timeout(timeout):
        while _processes_with(marker) != count:
            await asyncio.sleep(0.2)


ESCAPER = (
    "import os, signal, time; os.setpgid(0, 0); signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " time.sleep(3600)"
)
"""A helper that leaves its container's process group and ignores SIGTERM (a daemon's child
such as the nvidia-imex NVIDIA's daemon starts; a shell job); its argument is a marker."""


def escaping_command(marker: str) -> list[str]:
    """A container command that starts ``ESCAPER`` (marked) and then sleeps in place."""
    return ["sh", "-c", f'{sys.executable} -c "{ESCAPER}" {marker} & exec sleep 3600']


async def test_a_stopped_node_ends_every_process_of_its_containers(
    admin: AsyncClient, ns: str, nodes_sim: state.SimPaths
) -> None:
    """A container's processes all end with it, as a PID namespace's do: also a helper that
    moved to a process group of its own and ignores SIGTERM. Before, such a helper outlived
    the node's power cut (and ``cdctl sim down``), re-parented to PID 1."""
    marker = f"escaper-{uuid.uuid4().hex[:8]}"
    await admin.create(_plain_pod("escaper", ns, escaping_command(marker), NODE_A))
    await wait_for(admin, Pod, "escaper", _running_ready, namespace=ns, timeout=60)
    await _until_count(marker, 1)
    await asyncio.to_thread(node_op, nodes_sim, "stop", NODE_A)
    try:
        await _until_count(marker, 0, timeout=15)
    finally:
        await asyncio.to_thread(node_op, nodes_sim, "start", NODE_A)
    await admin.delete(Pod, "escaper", namespace=ns)
    await _until_count(marker, 0, timeout=60)  # and when the restarted pod is deleted


TERM_TELLER = (
    "import signal, sys, time\n"
    "def told(*_):\n"
    "    print('got SIGTERM', flush=True)\n"
    "    time.sleep(30)\n"
    "signal.signal(signal.SIGTERM, told)\n"
    "print('waiting', flush=True)\n"
    "time.sleep(3600)\n"
)
"""A container program that says so in its log when it gets SIGTERM (its shutdown's first act
would be an API write, as an agent's unlabelling of its pod)."""
TELLERS = 6


async def test_a_power_cut_kills_containers_without_sigterm(
    admin: AsyncClient, ns: str, nodes_sim: state.SimPaths
) -> None:
    """A stopped node's containers get SIGKILL and nothing before it: a machine that loses power
    runs no shutdown. Before, they got SIGTERM and SIGKILL at once, and a resident agent's
    SIGTERM handler unlabelled its pod in between, so the CD read "its IMEX daemon pod is gone"
    instead of its peers' PeerUnreachable (the resident e2e peer-loss failure). Six tellers in
    one pod: each SIGTERM was a race against its SIGKILL, which one alone often won."""
    names_ = [f"c{i}" for i in range(TELLERS)]
    command = [sys.executable, "-c", TERM_TELLER]
    doc = _plain_pod("teller", ns, command, NODE_A).to_dict()
    doc["spec"]["containers"] = [
        {"name": name, "image": "debian:12", "command": command} for name in names_
    ]
    pod = await admin.create(Pod.from_dict(doc))
    assert pod.metadata is not None
    folder = nodes_sim.node_root(NODE_A) / "var/log/pods" / f"{ns}_teller_{pod.metadata.uid}"
    logs = [folder / f"{name}.log" for name in names_]
    await wait_for(admin, Pod, "teller", _running_ready, namespace=ns, timeout=60)
    async with asyncio.timeout(30):  # each handler is set once its program said so (a file)
        while not all("waiting" in (p.read_text() if p.exists() else "") for p in logs):
            await asyncio.sleep(0.1)
    await asyncio.to_thread(node_op, nodes_sim, "stop", NODE_A)
    try:
        told = [p.name for p in logs if "got SIGTERM" in p.read_text()]
        assert not told, f"a power cut sent SIGTERM to {told}"
    finally:
        await asyncio.to_thread(node_op, nodes_sim, "start", NODE_A)
    await admin.delete(Pod, "teller", namespace=ns)


def _restarted_after(first: Pod) -> Callable[[Pod], bool]:
    """Running and Ready again in a new container that counts the reboot as a restart.

    A kubelet finds the container the power cut ended: restartCount goes up by one and the
    last state says it ended for an unknown reason (exit 255), with the old container's id.
    """
    assert first.status is not None and first.status.containerStatuses
    old = first.status.containerStatuses[0]

    def restarted(p: Pod) -> bool:
        statuses = (p.status.containerStatuses if p.status else None) or []
        now = statuses[0] if statuses else None
        if not (
            _running_ready(p)
            and now
            and now.state
            and now.state.running
            and now.containerID != old.containerID
        ):
            return False
        assert now.restartCount == old.restartCount + 1, now
        last = now.lastState.terminated if now.lastState else None
        assert last is not None and (last.exitCode, last.reason) == (255, "Unknown"), now
        assert last.containerID == old.containerID, now
        return True

    return restarted


async def test_a_rebooted_node_runs_each_container_once(
    admin: AsyncClient, ns: str, nodes_sim: state.SimPaths
) -> None:
    """A power cut ends the pod's container loops: the node's next boot is the only restarter.

    Regression: the loops outlived the cancelled pod worker and restarted the killed containers
    next to the rebooted node's own, so every pod ran twice (two kubelet plugins fought over
    one ResourceSlice).
    """
    marker = f"reboot-{uuid.uuid4().hex[:8]}"
    await admin.create(
        _plain_pod("survivor", ns, ["sh", "-c", f"sleep 3600; echo {marker}"], NODE_B)
    )
    first = await wait_for(admin, Pod, "survivor", _running_ready, namespace=ns, timeout=60)
    await _until_count(marker, 1)
    await asyncio.to_thread(node_op, nodes_sim, "reboot", NODE_B)
    await wait_for(admin, Pod, "survivor", _restarted_after(first), namespace=ns, timeout=120)
    await _until_count(marker, 1)
    # An absence, watched through the window in which a stray loop would have restarted the
    # container (its 2 s, then 4 s, back-off).
    loop = asyncio.get_running_loop()
    end = loop.time() + 6.5
    while loop.time() < end:
        assert _processes_with(marker) == 1
        await asyncio.sleep(0.25)


async def test_a_rebooted_node_prepares_again_and_publishes_new_addresses(
    admin: AsyncClient, ns: str, driver: TestDriver, nodes_sim: state.SimPaths
) -> None:
    """After a reboot the kubelet prepares its pods' claims again, creates their containers with
    the claimed device once, and publishes the pods' new sandbox addresses.

    Regression (acceptance L.2 reboot): the re-prepared claim listed its device twice (the
    checkpointed entry plus the new one), the container failed on the existing device node
    and crash-looped; and the status patch merged the new pod IP next to the old one, which
    the API server refuses, so the node's pods stayed ContainerCreating.
    """
    await _wait_registered(driver)
    await _template(admin, ns)
    # Created first, the filler takes the lower address now; after the reboot the pods are
    # listed by name, so the user pod gets a different address from the restarted node.
    await admin.create(_plain_pod("z-filler", ns, ["sleep", "3600"], NODE_A))
    await wait_for(admin, Pod, "z-filler", _running_ready, namespace=ns, timeout=60)
    await admin.create(_claim_pod("a-user", ns, NODE_A))
    first = await wait_for(admin, Pod, "a-user", _running_ready, namespace=ns, timeout=90)
    claim_uid = driver.prepared[-1]
    assert first.status is not None and first.status.containerStatuses
    await asyncio.to_thread(node_op, nodes_sim, "reboot", NODE_A)
    pod = await wait_for(admin, Pod, "a-user", _restarted_after(first), namespace=ns, timeout=90)
    assert driver.prepared.count(claim_uid) == 2, driver.prepared
    assert claim_uid not in driver.unprepared, "a claim of a running pod was unprepared"
    assert pod.status is not None and first.status.podIP != pod.status.podIP
    assert [a.ip for a in pod.status.podIPs or []] == [pod.status.podIP]
