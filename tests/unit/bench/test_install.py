"""Installing a driver for a benchmark round: the helm command and the readiness check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compute_domains.bench import drivers, install


def test_helm_argv_installs_the_release_with_its_values_in_order() -> None:
    spec = drivers.DriverSpec(
        name="nvidia",
        chart=Path("/c/nvidia-dra-driver-gpu"),
        release="nvidia-dra-driver-gpu",
        namespace="nvidia-dra-driver-gpu",
        values=("resources.gpus.enabled=false", "nvidiaDriverRoot=/run/nvidia/driver"),
    )
    assert install.helm_argv(Path("/b/helm"), Path("/k"), spec, 300) == [
        "/b/helm",
        "--kubeconfig",
        "/k",
        "upgrade",
        "--install",
        "nvidia-dra-driver-gpu",
        "/c/nvidia-dra-driver-gpu",
        "--namespace",
        "nvidia-dra-driver-gpu",
        "--create-namespace",
        "--wait",
        "--timeout",
        "300s",
        "--set",
        "resources.gpus.enabled=false",
        "--set",
        "nvidiaDriverRoot=/run/nvidia/driver",
    ]


def _pod(name: str, ready: bool) -> dict[str, Any]:
    status = "True" if ready else "False"
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": status}]},
    }


def _ds(name: str, ready: int, desired: int, observed: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "generation": 1},
        "status": {
            "observedGeneration": observed,
            "desiredNumberScheduled": desired,
            "numberReady": ready,
        },
    }


def _node(name: str, gpus: int) -> dict[str, Any]:
    capacity = {"cpu": "72"} | ({install.GPU_RESOURCE: str(gpus)} if gpus else {})
    return {"metadata": {"name": name}, "status": {"capacity": capacity}}


def _slice(node: str) -> dict[str, Any]:
    return {"metadata": {"name": f"{node}-x"}, "spec": {"nodeName": node}}


NODES = [_node("cp", 0), _node("n1", 4), _node("n2", 4)]
READY: dict[str, Any] = {
    "pods": [_pod("controller", True), _pod("plugin-a", True), _pod("plugin-b", True)],
    "daemonsets": [_ds("plugin", 2, 2)],
    "deployments": [
        {
            "metadata": {"name": "controller"},
            "spec": {"replicas": 1},
            "status": {"readyReplicas": 1},
        }
    ],
    "slices": [_slice("n1"), _slice("n2")],
    "nodes": NODES,
}


def test_ready_when_every_pod_set_and_gpu_node_is() -> None:
    # The control-plane node has no GPU and needs no slice.
    assert install.missing(**READY) == []


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"pods": []}, "no pod in the release namespace yet"),
        ({"pods": [_pod("plugin-a", False)]}, "pod plugin-a not Ready"),
        # NVIDIA's DaemonSet (maxUnavailable 100%) while its plugins are still in init.
        ({"daemonsets": [_ds("plugin", 0, 2)]}, "DaemonSet plugin: 0/2 Ready"),
        ({"daemonsets": [_ds("plugin", 0, 0, observed=0)]}, "not yet observed"),
        (
            {"deployments": [{"metadata": {"name": "c"}, "spec": {"replicas": 1}, "status": {}}]},
            "Deployment c: 0/1 Ready",
        ),
        ({"slices": [_slice("n1")]}, "1 GPU node(s) without a ResourceSlice: n2"),
        ({"slices": [], "nodes": [_node("cp", 0)]}, "no GPU node"),
    ],
)
def test_missing_says_what_is_not_ready(change: dict[str, Any], says: str) -> None:
    assert any(says in line for line in install.missing(**(READY | change)))


def _driver_slice(node: str, driver: str) -> dict[str, Any]:
    return {"metadata": {"name": f"{node}-{driver}"}, "spec": {"nodeName": node, "driver": driver}}


def test_a_kubelet_that_has_not_registered_the_driver_is_not_ready() -> None:
    """Where the sim says what each kubelet registered, a node whose kubelet has not yet
    registered a driver that published a slice there keeps the driver not ready: a pod sent
    there now fails its prepare and waits for the kubelet's retry."""
    slices = [_driver_slice("n1", "compute-domain.nvidia.com")]
    slices += [_driver_slice("n2", "compute-domain.nvidia.com")]
    state = READY | {"slices": slices}
    both = {"n1": ["compute-domain.nvidia.com"], "n2": ["compute-domain.nvidia.com"]}
    assert install.missing(**state, registered=both) == []
    assert install.missing(**state) == [], "without the sim's answer the check is left out"
    lacking = install.missing(**state, registered={"n1": ["compute-domain.nvidia.com"]})
    assert lacking == ["1 kubelet(s) without the driver registered: n2 (compute-domain.nvidia.com)"]
    # The control-plane node and drivers without a slice on a node are not asked for.
    extra = {"cp": [], "n1": ["compute-domain.nvidia.com", "gpu.nvidia.com"]}
    assert install.missing(**state, registered=both | extra) == []


def _pod(name: str, ready: bool, **container: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"name": "kubelet-plugin", "ready": ready, **container}],
        },
    }


def test_a_failed_install_names_the_pods_that_keep_it_from_ready() -> None:
    # Seen on the 16-core machine: helm said only "context deadline exceeded" after five
    # minutes, while every plugin pod crash-looped on a missing driver root.
    looping = {
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
    }
    pods = [
        _pod("plugin-a", False, restartCount=7, **looping),
        _pod("plugin-b", False, restartCount=6, **looping),
        _pod("plugin-c", False, restartCount=0, state={"waiting": {"reason": "PodInitializing"}}),
        _pod("agent-a", True, restartCount=0, state={"running": {}}),
    ]
    lines, first = install.not_ready(pods)
    assert lines == [
        "2 pod(s): container kubelet-plugin CrashLoopBackOff, last exit 1 (Error),"
        " up to 7 restarts",
        "1 pod(s): container kubelet-plugin PodInitializing, up to 0 restarts",
    ]
    assert first == "plugin-a"
    assert install.not_ready(pods[3:]) == ([], None)
