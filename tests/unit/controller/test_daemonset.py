"""Rendering of the per-CD DaemonSet (upstream §7.3 plus our documented differences)."""

from __future__ import annotations

from compute_domains import controller
from compute_domains.api import names
from compute_domains.controller import daemonset

UID = "3f1c2b7a-0000-4000-8000-000000000001"


def _render(**kw: object) -> dict[str, object]:
    settings = controller.DaemonSettings(image="ghcr.io/compute-domains/compute-domains:1.2", **kw)  # type: ignore[arg-type]
    return daemonset.render(domain_uid=UID, namespace="cd-system", settings=settings).to_dict()


def test_identity_labels_finalizer_no_owner() -> None:
    ds = _render()
    meta = ds["metadata"]
    assert meta == {
        "finalizers": [names.FINALIZER],
        "labels": {names.COMPUTE_DOMAIN_LABEL: UID},
        "name": f"computedomain-daemon-{UID}",
        "namespace": "cd-system",
    }
    assert ds["spec"]["selector"] == {"matchLabels": {names.COMPUTE_DOMAIN_LABEL: UID}}
    assert ds["spec"]["template"]["metadata"] == {
        "labels": {names.COMPUTE_DOMAIN_LABEL: UID},
        "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8082"},
    }
    assert "updateStrategy" not in ds["spec"]


def test_pod_placement_claims_and_account() -> None:
    pod = _render()["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "compute-domain-daemon-service-account"
    assert pod["nodeSelector"] == {names.COMPUTE_DOMAIN_LABEL: UID}
    assert pod["tolerations"] == [
        {"effect": "NoSchedule", "operator": "Exists"},
        {"effect": "NoExecute", "operator": "Exists"},
        {"effect": "PreferNoSchedule", "operator": "Exists"},
    ]
    assert pod["resourceClaims"] == [
        {
            "name": "compute-domain-daemon",
            "resourceClaimTemplateName": f"computedomain-daemon-{UID}",
        }
    ]
    assert "imagePullSecrets" not in pod
    assert "hostNetwork" not in pod and "affinity" not in pod


def test_container_command_env_and_probes() -> None:
    (c,) = _render(log_level="debug", log_format="json", max_nodes_per_imex_domain=4)["spec"][
        "template"
    ]["spec"]["containers"]
    assert c["name"] == "compute-domain-daemon"
    assert c["image"] == "ghcr.io/compute-domains/compute-domains:1.2"
    assert c["command"] == ["cdctl", "daemon", "run"]
    assert c["resources"] == {"claims": [{"name": "compute-domain-daemon"}]}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env == {
        "LOG_VERBOSITY": "debug",
        "CD_LOG_LEVEL": "debug",
        "CD_LOG_FORMAT": "json",
        "MAX_NODES_PER_IMEX_DOMAIN": "4",
        "NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        "POD_IP": {"fieldRef": {"fieldPath": "status.podIP"}},
        "POD_UID": {"fieldRef": {"fieldPath": "metadata.uid"}},
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        "NVIDIA_VISIBLE_DEVICES": "void",
        "METRICS_PORT": "8082",
    }
    # No probe starts a process: the daemon answers them from its own IMEX check.
    assert c["ports"] == [{"name": "metrics", "containerPort": 8082}]
    check = {"path": "/readyz", "port": "metrics"}
    common = {
        "httpGet": check,
        "initialDelaySeconds": 0,
        "timeoutSeconds": 10,
        "successThreshold": 1,
    }
    assert c["startupProbe"] == {**common, "periodSeconds": 1, "failureThreshold": 1200}
    assert c["livenessProbe"] == {**common, "periodSeconds": 60, "failureThreshold": 20}
    assert c["readinessProbe"] == {**common, "periodSeconds": 5, "failureThreshold": 1}


def test_image_pull_secrets_are_rendered_when_set() -> None:
    pod = _render(image_pull_secrets=("a", "b"))["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "a"}, {"name": "b"}]


def test_metrics_port_zero_renders_no_port_env_or_annotations() -> None:
    ds = _render(metrics_port=0)
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    assert "ports" not in c and "METRICS_PORT" not in {e["name"] for e in c["env"]}
    assert "annotations" not in ds["spec"]["template"]["metadata"]
    # Nothing served: the probes exec the same IMEX check.
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert c[probe]["exec"] == {"command": ["cdctl", "daemon", "check"]}
        assert "httpGet" not in c[probe]


def test_without_the_warm_annotation_the_render_is_unchanged() -> None:
    settings = controller.DaemonSettings(image="ghcr.io/compute-domains/compute-domains:1.2")
    plain = daemonset.render(domain_uid=UID, namespace="cd-system", settings=settings)
    explicit = daemonset.render(
        domain_uid=UID, namespace="cd-system", settings=settings, warm=False
    )
    assert plain.to_dict() == explicit.to_dict()
    assert not daemonset.is_warm(plain)


def test_with_the_warm_annotation_two_ored_affinity_terms_replace_the_node_selector() -> None:
    settings = controller.DaemonSettings(image="ghcr.io/compute-domains/compute-domains:1.2")
    ds = daemonset.render(domain_uid=UID, namespace="cd-system", settings=settings, warm=True)
    pod = ds.to_dict()["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": names.COMPUTE_DOMAIN_LABEL, "operator": "In", "values": [UID]}
                ]
            },
            {
                "matchExpressions": [
                    {"key": names.WARM_FOR_LABEL, "operator": "In", "values": [UID]}
                ]
            },
        ]
    }
    assert daemonset.is_warm(ds)
    plain = daemonset.render(domain_uid=UID, namespace="cd-system", settings=settings).to_dict()
    assert {k: v for k, v in pod.items() if k != "affinity"} == {
        k: v for k, v in plain["spec"]["template"]["spec"].items() if k != "nodeSelector"
    }
    on = daemonset.placement_patch(UID, warm=True)["spec"]["template"]["spec"]  # type: ignore[index]
    assert on == {"nodeSelector": None, "affinity": pod["affinity"]}
    off = daemonset.placement_patch(UID, warm=False)["spec"]["template"]["spec"]  # type: ignore[index]
    assert off == {"nodeSelector": {names.COMPUTE_DOMAIN_LABEL: UID}, "affinity": None}
