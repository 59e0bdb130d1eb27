"""The resident IMEX agents in the chart (``imex.agents``): rendered only when selected, their own
DaemonSet with OnDelete, a PriorityClass, Guaranteed QoS, host mounts and least-privilege RBAC."""

from __future__ import annotations

from typing import Any

from compute_domains.sim import toolchain
from tests.unit.chart import render

AGENT = "nvidia-dra-driver-gpu-imex-agent"


def _named(r: render.Rendered, kind: str, name: str) -> list[dict[str, Any]]:
    return [d for d in r.all(kind) if d["metadata"]["name"] == name]


def test_by_default_no_agent_and_the_controller_makes_per_cd_daemonsets(
    toolset: toolchain.Toolset,
) -> None:
    r = render.render(toolset)
    assert _named(r, "DaemonSet", AGENT) == []
    assert _named(r, "ServiceAccount", AGENT) == []
    assert r.env("Deployment")["IMEX_AGENTS"] == "perComputeDomain"


def test_resident_renders_its_own_daemonset_and_tells_the_controller(
    toolset: toolchain.Toolset,
) -> None:
    r = render.render(toolset, "imex.agents=resident")
    assert r.env("Deployment")["IMEX_AGENTS"] == "resident"
    (ds,) = _named(r, "DaemonSet", AGENT)
    assert _named(
        r, "DaemonSet", "nvidia-dra-driver-gpu-kubelet-plugin"
    )  # the plugin's stays separate
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    pod = ds["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == AGENT
    assert pod["priorityClassName"] == "system-node-critical"
    (container,) = pod["containers"]
    assert container["command"][:3] == ["cdctl", "agent", "run"]
    res = container["resources"]
    assert res["requests"] == res["limits"] == {"cpu": "1", "memory": "256Mi"}  # Guaranteed
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["driver-root"]["readOnly"] is True
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert volumes["domains"] == "/var/lib/kubelet/plugins/compute-domain.nvidia.com/domains"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DOMAINS_DIR"] == mounts["domains"]["mountPath"]
    assert "resource.nvidia.com/computeDomain" not in ds["spec"]["template"]["metadata"]["labels"]


def test_resident_agent_rbac_is_what_it_uses(toolset: toolchain.Toolset) -> None:
    r = render.render(toolset, "imex.agents=resident")
    (cluster,) = _named(r, "ClusterRole", f"cd-{AGENT}")
    assert {(tuple(x["resources"]), tuple(x["verbs"])) for x in cluster["rules"]} == {
        (("nodes",), ("get", "list", "watch")),
        (("computedomains",), ("get", "list", "watch")),
        (("events",), ("create", "patch")),  # ImexSessionInUse on a served CD, in its namespace
    }
    (role,) = _named(r, "Role", AGENT)
    verbs = {x["resources"][0]: set(x["verbs"]) for x in role["rules"]}
    assert verbs == {
        # create/update: its own entry in the shared registry (per-clique scope)
        "computedomaincliques": {"get", "list", "watch", "create", "update", "patch"},
        "pods": {"get", "list", "watch", "patch"},
        "events": {"create", "patch"},
        "daemonsets": {"get"},
    }


def test_agent_values_can_be_changed(toolset: toolchain.Toolset) -> None:
    r = render.render(
        toolset,
        "imex.agents=resident",
        "imex.agent.updateStrategy.type=RollingUpdate",
        "imex.agent.priorityClassName=cd-daemon",
        "imex.agent.resources.cpu=",
    )
    (ds,) = _named(r, "DaemonSet", AGENT)
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    pod = ds["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "cd-daemon"
    assert pod["containers"][0]["resources"]["limits"] == {"memory": "256Mi"}


def test_an_unknown_agents_mode_is_refused(toolset: toolchain.Toolset) -> None:
    assert "agents" in render.refusal(toolset, "imex.agents=perNode")
