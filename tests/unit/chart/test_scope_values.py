"""The isolation scope in the chart (``imex.scope``): the controller's default, the plugin's eager
shared IMEX, the refusal without resident agents, and the cliques RBAC the scope needs."""

from __future__ import annotations

from typing import Any

from compute_domains.sim import toolchain
from tests.unit.chart import render

PLUGIN = "nvidia-dra-driver-gpu-kubelet-plugin"
AGENT = "nvidia-dra-driver-gpu-imex-agent"


def _clique_verbs(r: render.Rendered, role: str) -> set[str]:
    (found,) = [d for d in r.all("Role") if d["metadata"]["name"] == role]
    rules: list[dict[str, Any]] = found["rules"]
    (rule,) = [x for x in rules if x["resources"] == ["computedomaincliques"]]
    return set(rule["verbs"])


def test_by_default_new_cds_are_per_domain_and_the_plugin_is_not_eager(
    toolset: toolchain.Toolset,
) -> None:
    r = render.render(toolset)
    assert r.env("Deployment")["IMEX_SCOPE"] == "perDomain"
    assert "SHARED_IMEX_EAGER" not in r.env("DaemonSet")
    assert _clique_verbs(r, PLUGIN) == {"get", "list", "watch"}


def test_per_clique_tells_the_controller_the_plugin_and_the_agent(
    toolset: toolchain.Toolset,
) -> None:
    r = render.render(toolset, "imex.agents=resident", "imex.scope=perClique")
    assert r.env("Deployment")["IMEX_SCOPE"] == "perClique"
    (plugin,) = [d for d in r.all("DaemonSet") if d["metadata"]["name"] == PLUGIN]
    env = {
        e["name"]: e.get("value")
        for e in plugin["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["SHARED_IMEX_EAGER"] == "true"
    (agent,) = [d for d in r.all("DaemonSet") if d["metadata"]["name"] == AGENT]
    agent_env = {
        e["name"]: e.get("value") for e in agent["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    # The agent is told too: an idle agent on a clique node is not Ready until the plugin's
    # eager label came (issue 28: Ready before it, then NotReady for the IMEX start).
    assert agent_env["SHARED_IMEX_EAGER"] == "true"


def test_resident_per_domain_keeps_the_plugin_lazy(toolset: toolchain.Toolset) -> None:
    r = render.render(toolset, "imex.agents=resident")
    assert r.env("Deployment")["IMEX_SCOPE"] == "perDomain"
    (plugin,) = [d for d in r.all("DaemonSet") if d["metadata"]["name"] == PLUGIN]
    names = {e["name"] for e in plugin["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "SHARED_IMEX_EAGER" not in names
    (agent,) = [d for d in r.all("DaemonSet") if d["metadata"]["name"] == AGENT]
    agent_names = {e["name"] for e in agent["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "SHARED_IMEX_EAGER" not in agent_names  # idle agents are Ready at once


def test_per_clique_without_resident_agents_is_refused(toolset: toolchain.Toolset) -> None:
    why = render.refusal(toolset, "imex.scope=perClique")
    assert "imex.scope=perClique needs imex.agents=resident" in why
    assert "imex.agents=perComputeDomain" in why
    why = render.refusal(toolset, "imex.scope=perClique", "imex.agents=perComputeDomain")
    assert "needs imex.agents=resident" in why


def test_an_unknown_scope_is_refused_by_the_schema(toolset: toolchain.Toolset) -> None:
    why = render.refusal(toolset, "imex.agents=resident", "imex.scope=perNode")
    assert "imex" in why and "scope" in why and "perClique" in why


def test_with_resident_agents_plugin_and_agent_may_write_the_shared_registries(
    toolset: toolchain.Toolset,
) -> None:
    """The plugin allocates a CD's channel in ``shared-imex.<clique>`` (and may create it); the
    agent writes its own entry there (and may create it); both in the driver namespace only."""
    for sets in (("imex.agents=resident",), ("imex.agents=resident", "imex.scope=perClique")):
        r = render.render(toolset, *sets)
        assert _clique_verbs(r, PLUGIN) == {"get", "list", "watch", "create", "patch", "update"}
        assert _clique_verbs(r, AGENT) == {"get", "list", "watch", "create", "update", "patch"}
        for role in (PLUGIN, AGENT):
            (found,) = [d for d in r.all("Role") if d["metadata"]["name"] == role]
            assert found["metadata"]["namespace"] == "cd"
        cluster = [d for d in r.all("ClusterRole") if d["metadata"]["name"] == f"cd-{PLUGIN}"]
        (plugin_cluster,) = cluster
        nodes = [x for x in plugin_cluster["rules"] if x["resources"] == ["nodes"]]
        assert "patch" in nodes[0]["verbs"]  # channel annotations and the shared-imex label
        assert not [x for x in plugin_cluster["rules"] if "computedomaincliques" in x["resources"]]


def test_the_controller_may_patch_cliques_and_nodes(toolset: toolchain.Toolset) -> None:
    r = render.render(toolset, "imex.agents=resident", "imex.scope=perClique")
    assert "patch" in _clique_verbs(r, "nvidia-dra-driver-gpu-controller")
    (cluster,) = [
        d
        for d in r.all("ClusterRole")
        if d["metadata"]["name"] == "cd-nvidia-dra-driver-gpu-controller"
    ]
    (nodes,) = [x for x in cluster["rules"] if x["resources"] == ["nodes"]]
    assert "patch" in nodes["verbs"]


def _plugin_env(r: render.Rendered) -> dict[str, Any]:
    (plugin,) = [d for d in r.all("DaemonSet") if d["metadata"]["name"] == PLUGIN]
    return {
        e["name"]: e.get("value")
        for e in plugin["spec"]["template"]["spec"]["containers"][0]["env"]
    }


def test_the_node_mark_is_the_label_unless_asked(toolset: toolchain.Toolset) -> None:
    """decision 0026: NVIDIA's node label by default, in both agent modes."""
    for sets in ((), ("imex.agents=resident",), ("imex.agents=resident", "imex.nodeMark=label")):
        assert "NODE_MARK" not in _plugin_env(render.render(toolset, *sets))
    r = render.render(toolset, "imex.agents=resident", "imex.nodeMark=annotation")
    assert _plugin_env(r)["NODE_MARK"] == "annotation"


def test_the_node_mark_as_annotation_needs_resident_agents(toolset: toolchain.Toolset) -> None:
    why = render.refusal(toolset, "imex.nodeMark=annotation")
    assert "imex.nodeMark=annotation needs imex.agents=resident" in why
    assert "selects its nodes by the node label resource.nvidia.com/computeDomain" in why
    why = render.refusal(toolset, "imex.agents=resident", "imex.nodeMark=taint")
    assert "nodeMark" in why and "annotation" in why
