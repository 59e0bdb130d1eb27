"""Daemon pod values: a PriorityClass and Guaranteed QoS, from the chart through the controller's
environment and settings into the DaemonSet it renders for each ComputeDomain (issue 15)."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from compute_domains import controller
from compute_domains.cli import controller as cli_controller
from compute_domains.controller import daemonset
from compute_domains.sim import toolchain
from tests.unit.chart import render

DEPLOY = "Deployment"


def _daemon_settings(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> controller.DaemonSettings:
    """The daemon settings ``cdctl controller run`` builds from the chart's controller env."""
    seen: list[controller.ControllerSettings] = []

    class _Captured:
        def __init__(self, settings: controller.ControllerSettings) -> None:
            seen.append(settings)

        async def run(self) -> None:
            return None

    monkeypatch.setattr(cli_controller.controller, "Controller", _Captured)
    plain = {k: v for k, v in env.items() if isinstance(v, str)}  # fieldRefs need a pod
    result = CliRunner().invoke(cli_controller.group, ["run"], env=plain)
    assert result.exit_code == 0, result.output
    (settings,) = seen
    return settings.daemon


def _daemon_pod(settings: controller.DaemonSettings) -> Any:
    ds = daemonset.render(domain_uid="cd-uid", namespace="cd", settings=settings)
    return ds.spec.template.spec  # type: ignore[union-attr]


def test_defaults_give_daemon_pods_the_charts_class_and_guaranteed_qos(
    toolset: toolchain.Toolset, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = render.render(toolset)
    (pc,) = r.all("PriorityClass")
    assert pc["metadata"]["name"] == "nvidia-dra-driver-gpu-daemon"
    assert pc["value"] == 1_000_000_000 and pc["globalDefault"] is False
    assert pc["preemptionPolicy"] == "Never"  # scheduled first, never evicts running pods
    env = r.env(DEPLOY)
    assert (env["DAEMON_PRIORITY_CLASS_NAME"], env["DAEMON_CPU"], env["DAEMON_MEMORY"]) == (
        "nvidia-dra-driver-gpu-daemon",
        "1",
        "256Mi",
    )
    pod = _daemon_pod(_daemon_settings(env, monkeypatch))
    assert pod.priorityClassName == "nvidia-dra-driver-gpu-daemon"
    (container,) = pod.containers
    res = container.resources
    # Guaranteed QoS: every container has cpu and memory limits equal to its requests.
    assert res.requests == res.limits == {"cpu": "1", "memory": "256Mi"}
    assert [c.name for c in res.claims] == ["compute-domain-daemon"]


def test_an_existing_class_or_none_and_other_amounts(
    toolset: toolchain.Toolset, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = render.render(
        toolset,
        "daemon.priorityClass.create=false",
        "daemon.priorityClass.name=system-node-critical",
        "daemon.resources.cpu=500m",
        "daemon.resources.memory=1Gi",
    )
    assert r.all("PriorityClass") == []
    pod = _daemon_pod(_daemon_settings(r.env(DEPLOY), monkeypatch))
    assert pod.priorityClassName == "system-node-critical"
    res = pod.containers[0].resources
    assert res.requests == res.limits == {"cpu": "500m", "memory": "1Gi"}

    none = render.render(
        toolset,
        "daemon.priorityClass.create=false",
        "daemon.resources.cpu=",
        "daemon.resources.memory=",
    )
    assert none.all("PriorityClass") == []
    pod = _daemon_pod(_daemon_settings(none.env(DEPLOY), monkeypatch))
    assert pod.priorityClassName is None
    res = pod.containers[0].resources
    assert res.requests is None and res.limits is None


def test_a_preempting_class_and_bad_values_are_refused_at_install(
    toolset: toolchain.Toolset,
) -> None:
    r = render.render(toolset, "daemon.priorityClass.preemptionPolicy=PreemptLowerPriority")
    assert r.one("PriorityClass")["preemptionPolicy"] == "PreemptLowerPriority"
    assert "daemon" in render.refusal(toolset, "daemon.resources.memory=lots")
    assert "daemon" in render.refusal(toolset, "daemon.priorityClass.value=2000000000")


def test_the_controller_refuses_an_amount_that_is_no_quantity() -> None:
    with pytest.raises(Exception, match="not a Kubernetes quantity"):
        controller.DaemonSettings(image="img:1", cpu="one")
