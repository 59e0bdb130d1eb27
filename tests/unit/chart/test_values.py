"""NVIDIA's chart keys that work in ours: each one changes the rendered objects as it does there.

Also: the defaults give NVIDIA's names (``compat.nvidiaNames=false`` gives the release's), every
key NVIDIA documents is known to our schema, and
NVIDIA's whole default values file (with GPU allocation off) installs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compute_domains.sim import toolchain
from tests.unit.chart import nvidia_values, render

DEPLOY, DS = "Deployment", "DaemonSet"


def _container(r: render.Rendered, kind: str) -> dict[str, Any]:
    container: dict[str, Any] = r.pod(kind)["containers"][0]
    return container


def _volume(r: render.Rendered, name: str) -> str:
    (path,) = [v["hostPath"]["path"] for v in r.pod(DS)["volumes"] if v["name"] == name]
    return str(path)


def test_defaults_give_nvidias_names_labels_and_one_controller(
    toolset: toolchain.Toolset,
) -> None:
    """Issue 27 point 1: what NVIDIA's test cases select and exec by, whatever the release."""
    r = render.render(toolset)
    assert r.one(DEPLOY)["metadata"]["name"] == "nvidia-dra-driver-gpu-controller"
    assert r.one(DS)["metadata"]["name"] == "nvidia-dra-driver-gpu-kubelet-plugin"
    assert _container(r, DEPLOY)["name"] == "compute-domain"
    assert _container(r, DS)["name"] == "compute-domains"
    assert r.pod_labels(DEPLOY)["nvidia-dra-driver-gpu-component"] == "controller"
    assert r.pod_labels(DS)["nvidia-dra-driver-gpu-component"] == "kubelet-plugin"
    for kind in (DEPLOY, DS):
        assert r.pod_labels(kind)["app.kubernetes.io/name"] == "nvidia-dra-driver-gpu"
    # One pod, as NVIDIA's (its helpers take the controller pod's name from that label), and
    # leader election stays on, so an upgrade's surge pod never acts beside the old one.
    assert r.one(DEPLOY)["spec"]["replicas"] == 1
    assert r.env(DEPLOY)["LEADER_ELECTION_ENABLED"] == "true"
    # The Lease keeps the release's name: switching names must not let old and new pods both lead.
    assert r.env(DEPLOY)["LEADER_ELECTION_LEASE_LOCK_NAME"] == "cd-controller"
    sa = r.pod(DEPLOY)["serviceAccountName"]
    assert r.named("ServiceAccount", sa)["metadata"]["namespace"] == "cd"


def test_compat_off_gives_release_names_and_ours(toolset: toolchain.Toolset) -> None:
    r = render.render(toolset, "compat.nvidiaNames=false")
    assert r.one(DEPLOY)["metadata"]["name"] == "cd-controller"
    assert r.one(DS)["metadata"]["name"] == "cd-kubelet-plugin"
    assert (_container(r, DEPLOY)["name"], _container(r, DS)["name"]) == ("controller", "plugin")
    assert r.pod_labels(DEPLOY)["nvidia-dra-driver-gpu-component"] == "controller"
    assert r.pod_labels(DS)["nvidia-dra-driver-gpu-component"] == "kubelet-plugin"
    for kind, component in ((DEPLOY, "controller"), (DS, "kubelet-plugin")):
        assert r.one(kind)["spec"]["selector"]["matchLabels"] == {
            "app.kubernetes.io/name": "compute-domains",
            "app.kubernetes.io/instance": "cd",
            "app.kubernetes.io/component": component,
        }
    assert r.env(DEPLOY)["LEADER_ELECTION_LEASE_LOCK_NAME"] == "cd-controller"
    assert r.pod(DEPLOY)["serviceAccountName"] == "cd-controller"
    assert r.pod(DS)["serviceAccountName"] == "cd-kubelet-plugin"


@pytest.mark.parametrize(
    ("sets", "prefix", "app_name", "component_key"),
    [
        (("nameOverride=gpu-dra",), "gpu-dra", "gpu-dra", "gpu-dra-component"),
        (
            ("fullnameOverride=cds",),
            "cds",
            "nvidia-dra-driver-gpu",
            "nvidia-dra-driver-gpu-component",
        ),
        (
            ("nameOverride=gpu-dra", "fullnameOverride=cds"),
            "cds",
            "gpu-dra",
            "gpu-dra-component",
        ),
    ],
)
def test_name_overrides_rename_objects_and_labels(
    toolset: toolchain.Toolset,
    sets: tuple[str, ...],
    prefix: str,
    app_name: str,
    component_key: str,
) -> None:
    r = render.render(toolset, *sets)
    assert r.one(DEPLOY)["metadata"]["name"] == f"{prefix}-controller"
    assert r.one(DS)["metadata"]["name"] == f"{prefix}-kubelet-plugin"
    assert r.pod_labels(DS)["app.kubernetes.io/name"] == app_name
    assert r.pod_labels(DS)[component_key] == "kubelet-plugin"
    assert r.named("Role", f"{prefix}-daemon")["metadata"]["namespace"] == "cd"


def test_selector_labels_override_replaces_nvidias_component_label(
    toolset: toolchain.Toolset,
) -> None:
    r = render.render(toolset, "selectorLabelsOverride.team=gpu")
    assert r.pod_labels(DEPLOY)["team"] == "gpu"
    assert "nvidia-dra-driver-gpu-component" not in r.pod_labels(DEPLOY)


def test_namespace_override_moves_every_namespaced_object(toolset: toolchain.Toolset) -> None:
    r = render.render(toolset, "namespaceOverride=nvidia-dra-driver-gpu")
    namespaced = [d for d in r.docs if "namespace" in d["metadata"]]
    assert namespaced and {d["metadata"]["namespace"] for d in namespaced} == {
        "nvidia-dra-driver-gpu"
    }
    subjects = [s for d in r.all("ClusterRoleBinding") for s in d["subjects"]]
    assert {s["namespace"] for s in subjects} == {"nvidia-dra-driver-gpu"}


@pytest.mark.parametrize("level", [str(n) for n in range(11)] + ["debug", "info"])
def test_every_log_verbosity_reaches_all_components(toolset: toolchain.Toolset, level: str) -> None:
    r = render.render(toolset, f"logVerbosity={level}")
    assert r.env(DEPLOY)["LOG_VERBOSITY"] == level
    assert r.env(DEPLOY)["LOG_VERBOSITY_CD_DAEMON"] == level
    assert r.env(DS)["LOG_VERBOSITY"] == level


def test_driver_root_top_level_key_and_its_older_alias(toolset: toolchain.Toolset) -> None:
    r = render.render(toolset, "nvidiaDriverRoot=/run/nvidia/driver")
    assert _volume(r, "driver-root") == "/run/nvidia/driver"
    assert r.env(DS)["NVIDIA_DRIVER_ROOT"] == "/run/nvidia/driver"
    alias = render.render(toolset, "kubeletPlugin.nvidiaDriverRoot=/opt/nvidia")
    assert _volume(alias, "driver-root") == "/opt/nvidia"
    same = render.render(
        toolset, "nvidiaDriverRoot=/opt/nvidia", "kubeletPlugin.nvidiaDriverRoot=/opt/nvidia"
    )
    assert _volume(same, "driver-root") == "/opt/nvidia"


def test_kubelet_directories_take_nvidias_keys(toolset: toolchain.Toolset) -> None:
    r = render.render(
        toolset,
        "kubeletPlugin.kubeletRegistrarDirectoryPath=/data/kubelet/plugins_registry",
        "kubeletPlugin.kubeletPluginsDirectoryPath=/data/kubelet/plugins",
    )
    env = r.env(DS)
    assert env["KUBELET_REGISTRAR_DIRECTORY_PATH"] == "/data/kubelet/plugins_registry"
    assert env["KUBELET_PLUGINS_DIRECTORY_PATH"] == "/data/kubelet/plugins"
    assert _volume(r, "plugins-registry") == "/data/kubelet/plugins_registry"
    assert _volume(r, "plugins") == "/data/kubelet/plugins"
    mounts = {m["name"]: m["mountPath"] for m in _container(r, DS)["volumeMounts"]}
    assert mounts["plugins"] == "/data/kubelet/plugins"
    root = render.render(toolset, "kubeletPlugin.kubeletRootDir=/k")
    assert _volume(root, "plugins") == "/k/plugins"


def test_plugin_node_affinity_is_nvidias_nfd_default(toolset: toolchain.Toolset) -> None:
    r = render.render(toolset)
    assert r.pod(DS)["affinity"] == nvidia_values.nfd_affinity()
    assert "nodeSelector" not in r.pod(DS)
    chosen = render.render(toolset, "kubeletPlugin.nodeSelector.gpu=yes")
    assert chosen.pod(DS)["nodeSelector"] == {"gpu": "yes"}


def test_the_plugins_liveness_probe_takes_what_is_set_and_keeps_the_rest(
    toolset: toolchain.Toolset,
) -> None:
    live = _container(render.render(toolset), DS)["livenessProbe"]
    assert (live["periodSeconds"], live["timeoutSeconds"], live["failureThreshold"]) == (10, 10, 3)
    key = "kubeletPlugin.containers.computeDomains.livenessProbe.failureThreshold"
    live = _container(render.render(toolset, f"{key}=12"), DS)["livenessProbe"]
    assert (live["periodSeconds"], live["timeoutSeconds"], live["failureThreshold"]) == (10, 10, 12)
    assert live["httpGet"] == {"path": "/healthz", "port": "metrics"}


@pytest.mark.parametrize(
    ("sets", "strict"),
    [
        ((), "true"),
        (("kubeletPlugin.strictFabric=false",), "false"),
        (("featureGates.CrashOnNVLinkFabricErrors=false",), "false"),
        (
            ("kubeletPlugin.strictFabric=false", "featureGates.CrashOnNVLinkFabricErrors=true"),
            "true",
        ),
    ],
)
def test_crash_on_fabric_errors_gate_is_strict_fabric(
    toolset: toolchain.Toolset, sets: tuple[str, ...], strict: str
) -> None:
    assert render.render(toolset, *sets).env(DS)["STRICT_FABRIC"] == strict


def test_gates_we_always_have_or_never_have_are_accepted_at_those_values(
    toolset: toolchain.Toolset,
) -> None:
    render.render(
        toolset,
        "featureGates.IMEXDaemonsWithDNSNames=true",
        "featureGates.ComputeDomainCliques=true",
        "featureGates.MPSSupport=false",
        "featureGates.DynamicMIG=false",
        "featureGates.ContextualLogging=true",
    )


def test_pod_settings_reach_both_pods(toolset: toolchain.Toolset) -> None:
    sets = []
    for part in ("controller", "kubeletPlugin"):
        sets += [
            f"{part}.priorityClassName=high",
            f"{part}.podAnnotations.team=gpu",
            f"{part}.podSecurityContext.runAsNonRoot=false",
            f"{part}.tolerations[0].key=dedicated",
            f"{part}.tolerations[0].operator=Exists",
            f"{part}.nodeSelector.pool=a",
        ]
    r = render.render(toolset, *sets, "controller.affinity.podAffinity.x=1")
    for kind in (DEPLOY, DS):
        pod = r.pod(kind)
        assert pod["priorityClassName"] == "high"
        assert pod["securityContext"] == {"runAsNonRoot": False}
        assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
        assert pod["nodeSelector"] == {"pool": "a"}
        annotations = r.one(kind)["spec"]["template"]["metadata"]["annotations"]
        assert annotations["team"] == "gpu" and annotations["prometheus.io/scrape"] == "true"
    assert r.pod(DEPLOY)["affinity"] == {"podAffinity": {"x": 1}}


def test_container_settings_and_user_env_that_replaces_ours(toolset: toolchain.Toolset) -> None:
    r = render.render(
        toolset,
        "controller.containers.computeDomain.env[0].name=LOG_VERBOSITY_CD_DAEMON",
        "controller.containers.computeDomain.env[0].value=0",
        "controller.containers.computeDomain.resources.limits.cpu=1",
        "controller.containers.computeDomain.securityContext.readOnlyRootFilesystem=true",
        "kubeletPlugin.containers.computeDomains.env[0].name=EXTRA",
        "kubeletPlugin.containers.computeDomains.env[0].value=x",
        "kubeletPlugin.containers.computeDomains.resources.requests.memory=64Mi",
    )
    assert r.env(DEPLOY)["LOG_VERBOSITY_CD_DAEMON"] == "0"
    assert _container(r, DEPLOY)["resources"] == {"limits": {"cpu": 1}}
    assert _container(r, DEPLOY)["securityContext"] == {"readOnlyRootFilesystem": True}
    assert r.env(DS)["EXTRA"] == "x"
    assert _container(r, DS)["resources"] == {"requests": {"memory": "64Mi"}}
    assert _container(r, DS)["securityContext"] == {"privileged": True}


@pytest.mark.parametrize(("port", "env"), [("51515", "51515"), ("9000", "9000"), ("-1", None)])
def test_healthcheck_port_serves_grpc_health_or_none(
    toolset: toolchain.Toolset, port: str, env: str | None
) -> None:
    r = render.render(toolset, f"kubeletPlugin.containers.computeDomains.healthcheckPort={port}")
    assert r.env(DS).get("HEALTHCHECK_PORT") == env


def test_service_account_keys(toolset: toolchain.Toolset) -> None:
    r = render.render(toolset, "serviceAccount.name=dra", "serviceAccount.annotations.iam=role")
    assert r.pod(DEPLOY)["serviceAccountName"] == "dra-controller"
    assert r.pod(DS)["serviceAccountName"] == "dra-kubeletplugin"
    assert r.named("ServiceAccount", "dra-controller")["metadata"]["annotations"] == {"iam": "role"}
    none = render.render(toolset, "serviceAccount.create=false")
    assert [d["metadata"]["name"] for d in none.all("ServiceAccount")] == [
        "compute-domain-daemon-service-account"
    ]
    assert not [d for d in none.all("ClusterRole") if "controller" in d["metadata"]["name"]]


def test_network_policies_and_update_strategy(toolset: toolchain.Toolset) -> None:
    assert render.render(toolset).all("NetworkPolicy") == []
    r = render.render(
        toolset,
        "controller.networkPolicy.enabled=true",
        "kubeletPlugin.networkPolicy.enabled=true",
        "kubeletPlugin.updateStrategy.rollingUpdate.maxUnavailable=100%",
    )
    policies = {
        p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]: p
        for p in r.all("NetworkPolicy")
    }
    assert set(policies) == {"controller", "kubelet-plugin"}
    ports = [p["port"] for p in policies["controller"]["spec"]["egress"][0]["ports"]]
    assert ports == [443, 6443]
    assert r.one(DS)["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "100%"


def test_keys_accepted_without_effect_render_as_without_them(toolset: toolchain.Toolset) -> None:
    plain = render.render(toolset)
    same = render.render(
        toolset,
        "nvidiaCDIHookPath=/usr/local/bin/nvidia-cdi-hook",
        "gpuResourcesEnabledOverride=true",
        "resourceApiVersion=resource.k8s.io/v1",
        "resources.gpus.enabled=false",
        "resources.computeDomains.enabled=true",
        "webhook.enabled=false",
        "webhook.replicas=3",
        "kubeletPlugin.containers.gpus.healthcheckPort=51516",
    )
    assert same.docs == plain.docs


def test_every_key_nvidia_documents_or_reads_is_known_to_our_schema() -> None:
    # Including the webhook's and the GPU container's keys, accepted and unused here: our
    # schema refuses every key it does not declare (test_unknown_values.py).
    schema = json.loads((render.CHART / "values.schema.json").read_text())
    unknown = []
    paths = nvidia_values.key_paths(nvidia_values.defaults())
    for path in [*paths, *nvidia_values.UNDOCUMENTED]:
        node = schema
        for part in path.split("."):
            props = node.get("properties")
            if props is None:  # a free-form object (resources, securityContext, ...)
                break
            if part not in props:
                unknown.append(path)
                break
            node = props[part]
    assert unknown == []


def test_nvidias_default_values_install_once_gpu_allocation_is_off(
    toolset: toolchain.Toolset, tmp_path: Path
) -> None:
    values = nvidia_values.defaults()
    values["resources"]["gpus"]["enabled"] = False
    values["image"]["repository"] = "ghcr.io/compute-domains/compute-domains"
    r = render.render(toolset, values=values, tmp=tmp_path)
    assert r.env(DEPLOY)["LOG_VERBOSITY"] == "4"
    assert r.pod(DEPLOY)["affinity"] == values["controller"]["affinity"]
    assert r.pod(DS)["priorityClassName"] == "system-node-critical"
    assert r.env(DS)["HEALTHCHECK_PORT"] == "51515"
    assert r.env(DS)["KUBELET_PLUGINS_DIRECTORY_PATH"] == "/var/lib/kubelet/plugins"


def test_the_controller_prefers_nodes_without_gpus_and_never_requires_them(
    toolset: toolchain.Toolset,
) -> None:
    """A power cut of a GPU node must not take the status writer along where another node can
    run it; preferred only, so a cluster of GPU nodes alone still runs the controller."""
    affinity = render.render(toolset).pod(DEPLOY)["affinity"]
    preferred = affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in affinity["nodeAffinity"]
    wanted = [t["preference"]["matchExpressions"] for t in preferred]
    assert [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}] in wanted
    assert {"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"} in wanted[1]
    # One replica: no host spread, which in a rolling update pushed the new pod off the old
    # one's control-plane host onto a GPU node (seen in a sim with a control-plane node).
    assert "podAntiAffinity" not in affinity
    two = render.render(toolset, "controller.replicas=2").pod(DEPLOY)["affinity"]
    spread = two["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert spread[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert two["nodeAffinity"] == affinity["nodeAffinity"]
