"""NVIDIA's chart keys that compute-domains cannot honour are refused at install, with the reason.

Each refusal must name the value key and say why, so a values file written for NVIDIA's
v25.12.0 chart fails at ``helm install`` with something to act on, never silently or later in a
crash loop. Kubernetes 1.32 and 1.33 (which NVIDIA's chart supports with its beta DRA API) are
refused with the cluster's version, what is missing and what to do.
"""

from __future__ import annotations

import pytest

from compute_domains.sim import toolchain
from tests.unit.chart import render

GPU_GATES = ("MPSSupport", "TimeSlicingSettings", "DynamicMIG", "PassthroughSupport")


@pytest.mark.parametrize(
    ("sets", "key", "why"),
    [
        (
            ("resources.gpus.enabled=true",),
            "resources.gpus.enabled=true",
            "GPU allocation is out of scope",
        ),
        (
            ("resources.computeDomains.enabled=false",),
            "resources.computeDomains.enabled=false",
            "all this chart installs",
        ),
        (
            ("featureGates.IMEXDaemonsWithDNSNames=false",),
            "featureGates.IMEXDaemonsWithDNSNames=false",
            "DNS names",
        ),
        (
            ("featureGates.ComputeDomainCliques=false",),
            "featureGates.ComputeDomainCliques=false",
            "not implemented",
        ),
        *[
            (
                (f"featureGates.{gate}=true",),
                f"featureGates.{gate}=true",
                "GPU allocation is out of scope",
            )
            for gate in (*GPU_GATES, "NVMLDeviceHealthCheck")
        ],
        (("featureGates.SomethingNew=true",), "featureGates.SomethingNew", "unknown feature gate"),
        (("featureGates.MPSSupport=maybe",), "featureGates.MPSSupport=maybe", "true or false"),
        (("logVerbosity=11",), "logVerbosity=11", "klog verbosity 0-10"),
        (("logVerbosity=chatty",), "logVerbosity=chatty", "debug|info|warning|error"),
        (("webhook.enabled=true",), "webhook.enabled=true", "no admission webhook"),
        (
            ("resourceApiVersion=resource.k8s.io/v1beta1",),
            "resourceApiVersion=resource.k8s.io/v1beta1",
            "only resource.k8s.io/v1",
        ),
        (("namespace=elsewhere",), "namespace=elsewhere", "--namespace"),
        (
            ("kubeletPlugin.containers.init.resources.limits.cpu=1",),
            "kubeletPlugin.containers.init",
            "no init container",
        ),
        (
            ("nvidiaDriverRoot=/run/nvidia/driver", "kubeletPlugin.nvidiaDriverRoot=/opt/driver"),
            "kubeletPlugin.nvidiaDriverRoot=/opt/driver",
            "two different driver roots",
        ),
        (
            (
                "controller.containers.computeDomain.env[0].name=ADDITIONAL_NAMESPACES",
                "controller.containers.computeDomain.env[0].value=team-a",
            ),
            "ADDITIONAL_NAMESPACES=team-a",
            "not supported",
        ),
        (("nvidiaCtkPath=/usr/bin/nvidia-ctk",), "nvidiaCtkPath", "no CDI hooks"),
    ],
)
def test_a_key_compute_domains_cannot_honour_is_refused_naming_it(
    toolset: toolchain.Toolset, sets: tuple[str, ...], key: str, why: str
) -> None:
    message = render.refusal(toolset, *sets)
    assert "compute-domains: " in message and key in message, message
    assert why in message, message


def test_the_namespace_default_is_refused_unless_allowed(toolset: toolchain.Toolset) -> None:
    message = render.refusal(toolset, namespace="default")
    assert "namespace default" in message and "allowDefaultNamespace=true" in message, message
    allowed = render.render(toolset, "allowDefaultNamespace=true", namespace="default")
    assert allowed.one("Deployment")["metadata"]["namespace"] == "default"
    # namespaceOverride moves the objects out of the release namespace: no refusal.
    moved = render.render(toolset, "namespaceOverride=gpu-operator", namespace="default")
    assert moved.one("Deployment")["metadata"]["namespace"] == "gpu-operator"


@pytest.mark.parametrize(
    ("kube", "shown"),
    [("1.32.0", "v1.32.0"), ("1.33.0", "v1.33.0"), ("1.33.5-eks-1234", "v1.33.5")],
)
def test_clusters_before_1_34_are_refused_with_version_and_remedy(
    toolset: toolchain.Toolset, kube: str, shown: str
) -> None:
    message = render.refusal(toolset, kube=kube)
    assert f"this cluster runs Kubernetes {shown}" in message, message
    assert "needs 1.34 or later" in message and "resource.k8s.io/v1" in message, message
    assert "Upgrade the cluster" in message, message


def test_an_explicit_v1_api_version_does_not_lift_the_version_check(
    toolset: toolchain.Toolset,
) -> None:
    message = render.refusal(toolset, "resourceApiVersion=resource.k8s.io/v1", kube="1.33.0")
    assert "needs 1.34 or later" in message, message


def test_clusters_older_than_1_32_get_helms_own_kube_version_error(
    toolset: toolchain.Toolset,
) -> None:
    message = render.refusal(toolset, kube="1.31.0")
    assert "chart requires kubeVersion: >=1.32.0-0" in message, message


@pytest.mark.parametrize(
    "extra",
    [(), ("--api-versions", "resource.k8s.io/v1/DeviceClass")],
    ids=["default-api-set", "DeviceClass-served"],
)
@pytest.mark.parametrize("kube", ["1.34.0", "1.35.1"])
def test_1_34_and_later_render(
    toolset: toolchain.Toolset, kube: str, extra: tuple[str, ...]
) -> None:
    rendered = render.render(toolset, kube=kube, extra=extra)
    assert {d["apiVersion"] for d in rendered.all("DeviceClass")} == {"resource.k8s.io/v1"}


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("resources.gpus.enabled=yes", "/resources/gpus/enabled"),
        ("controller.replicas=two", "/controller/replicas"),
        ("compat.nvidiaNames=sure", "/compat/nvidiaNames"),
    ],
)
def test_values_of_the_wrong_type_fail_the_schema_naming_the_key(
    toolset: toolchain.Toolset, value: str, path: str
) -> None:
    done = render.helm(toolset, *render.template_args(), "--set-string", value)
    assert done.returncode != 0
    assert f"at '{path}'" in done.stderr, done.stderr


def test_helm_lint_passes_and_checks_the_schema(toolset: toolchain.Toolset) -> None:
    ok = render.helm(toolset, "lint", str(render.CHART), "-n", "cd", "--kube-version", "1.34.0")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = render.helm(
        toolset,
        "lint",
        str(render.CHART),
        "-n",
        "cd",
        "--kube-version",
        "1.34.0",
        "--set-string",
        "resources.gpus.enabled=yes",
    )
    assert bad.returncode != 0 and "/resources/gpus/enabled" in bad.stdout + bad.stderr
