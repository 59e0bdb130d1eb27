"""Patient node timings: asked for by demo and benchmarks, carried to kube-controller-manager."""

from __future__ import annotations

from pathlib import Path

from compute_domains.sim import components, controlplane, lifecycle, state, topology


def _argv(patience: bool) -> list[str]:
    paths = state.SimPaths(Path("/tmp/home"), "x")
    return lifecycle._supervisor_argv(
        paths, Path("/bin"), None, False, topology.Shape(racks=1), None, patience
    )


def test_the_supervisor_is_told_only_when_asked() -> None:
    assert "--patient-nodes" in _argv(True)
    assert "--patient-nodes" not in _argv(False)


def test_controller_manager_and_api_server_get_the_timings(tmp_path: Path) -> None:
    for tool in ("kube-controller-manager", "kube-apiserver"):
        (tmp_path / tool).touch()

    def api(settings: controlplane.ControlPlaneSettings) -> list[str]:
        return components.apiserver_argv(settings, 1, "http://e", tmp_path)

    def kcm(settings: controlplane.ControlPlaneSettings) -> list[str]:
        return components.controller_manager_argv(settings, 1, tmp_path / "kc", tmp_path)

    fast = kcm(controlplane.ControlPlaneSettings(state_dir=tmp_path, bin_dir=tmp_path))
    patient = kcm(
        controlplane.ControlPlaneSettings(
            state_dir=tmp_path, bin_dir=tmp_path, node_monitor_grace_s=40, eviction_toleration_s=300
        )
    )
    assert "--node-monitor-grace-period=8s" in fast
    assert "--node-monitor-grace-period=40s" in patient
    patient_api = api(
        controlplane.ControlPlaneSettings(
            state_dir=tmp_path, bin_dir=tmp_path, node_monitor_grace_s=40, eviction_toleration_s=300
        )
    )
    assert "--default-not-ready-toleration-seconds=300" in patient_api


def test_controller_manager_and_scheduler_get_client_rate_limits_for_large_shapes(
    tmp_path: Path,
) -> None:
    """Upstream's 20 requests/s would have the DaemonSet controller create 1,152 pods in minutes."""
    for tool in ("kube-controller-manager", "kube-scheduler"):
        (tmp_path / tool).touch()
    settings = controlplane.ControlPlaneSettings(state_dir=tmp_path, bin_dir=tmp_path)
    kcm = components.controller_manager_argv(settings, 1, tmp_path / "kc", tmp_path)
    sched = components.scheduler_argv(settings, 1, tmp_path / "kc")
    for argv in (kcm, sched):
        assert f"--kube-api-qps={components.CLIENT_QPS}" in argv
        assert f"--kube-api-burst={components.CLIENT_BURST}" in argv
    assert components.CLIENT_QPS >= 100 and components.CLIENT_BURST >= components.CLIENT_QPS


def test_the_api_server_has_room_for_a_thousand_kubelets(tmp_path: Path) -> None:
    (tmp_path / "kube-apiserver").touch()
    settings = controlplane.ControlPlaneSettings(state_dir=tmp_path, bin_dir=tmp_path)
    argv = components.apiserver_argv(settings, 1, "http://e", tmp_path)
    assert "--max-requests-inflight=1600" in argv
    assert "--max-mutating-requests-inflight=800" in argv


def test_the_scheduler_preempts_synchronously(tmp_path: Path) -> None:
    """v1.34's asynchronous preemption can preempt on a second node for one pod (#134249)."""
    (tmp_path / "kube-scheduler").touch()
    settings = controlplane.ControlPlaneSettings(state_dir=tmp_path, bin_dir=tmp_path)
    argv = components.scheduler_argv(settings, 1, tmp_path / "kc")
    assert "--feature-gates=SchedulerAsyncPreemption=false" in argv
