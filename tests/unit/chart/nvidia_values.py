"""The keys NVIDIA's v25.12.0 chart documents, with their default values (facts, not its file).

Written out from ``deployments/helm/nvidia-dra-driver-gpu/values.yaml`` at tag v25.12.0: every
documented key and its default, nothing else; ``UNDOCUMENTED`` adds the keys its templates read
that its values file does not list. The chart tests render our chart with these values (as a
user switching charts would pass them) and check that our schema knows every key.
"""

from __future__ import annotations

from typing import Any

_NFD_AFFINITY: dict[str, Any] = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {
                            "key": "feature.node.kubernetes.io/pci-10de.present",
                            "operator": "In",
                            "values": ["true"],
                        }
                    ]
                },
                {
                    "matchExpressions": [
                        {
                            "key": "feature.node.kubernetes.io/cpu-model.vendor_id",
                            "operator": "In",
                            "values": ["NVIDIA"],
                        }
                    ]
                },
                {
                    "matchExpressions": [
                        {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
                    ]
                },
            ]
        }
    }
}

_CONTROL_PLANE = "node-role.kubernetes.io/control-plane"


def defaults() -> dict[str, Any]:
    """NVIDIA's documented values with its defaults (``resources.gpus.enabled`` is true there)."""
    return {
        "nvidiaDriverRoot": "/",
        "nvidiaCDIHookPath": "",
        "nameOverride": "",
        "fullnameOverride": "",
        "namespaceOverride": "",
        "selectorLabelsOverride": {},
        "gpuResourcesEnabledOverride": False,
        "allowDefaultNamespace": False,
        "resourceApiVersion": "",
        "imagePullSecrets": [],
        "image": {
            "repository": "nvcr.io/nvidia/k8s-dra-driver-gpu",
            "pullPolicy": "IfNotPresent",
            "tag": "",
        },
        "serviceAccount": {"create": True, "annotations": {}, "name": ""},
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": True}},
        "featureGates": {},
        "logVerbosity": "4",
        "webhook": {
            "enabled": False,
            "replicas": 1,
            "servicePort": 443,
            "containerPort": 443,
            "priorityClassName": "system-cluster-critical",
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
            "podAnnotations": {},
            "podSecurityContext": {},
            "nodeSelector": {},
            "tolerations": [],
            "affinity": {},
            "containers": {"webhook": {"securityContext": {"privileged": False}, "resources": {}}},
            "serviceAccount": {"create": True, "name": ""},
            "failurePolicy": "Fail",
            "tls": {
                "mode": "cert-manager",
                "certManager": {"issuerType": "selfsigned", "issuerName": "", "dnsNames": []},
                "secret": {"name": "", "caBundle": ""},
            },
        },
        "controller": {
            "priorityClassName": "system-node-critical",
            "podAnnotations": {},
            "podSecurityContext": {},
            "nodeSelector": {},
            "tolerations": [{"key": _CONTROL_PLANE, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": {"computeDomain": {"securityContext": {}, "env": [], "resources": {}}},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": _CONTROL_PLANE, "operator": "Exists"}]}
                        ]
                    }
                }
            },
            "networkPolicy": {"enabled": False},
        },
        "kubeletPlugin": {
            "priorityClassName": "system-node-critical",
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "100%"},
            },
            "podAnnotations": {},
            "podSecurityContext": {},
            "nodeSelector": {},
            "tolerations": [],
            "kubeletRegistrarDirectoryPath": "/var/lib/kubelet/plugins_registry",
            "kubeletPluginsDirectoryPath": "/var/lib/kubelet/plugins",
            "containers": {
                "init": {"securityContext": {}, "resources": {}},
                "computeDomains": {
                    "env": [],
                    "securityContext": {"privileged": True},
                    "resources": {},
                    "healthcheckPort": 51515,
                },
                "gpus": {
                    "env": [],
                    "securityContext": {"privileged": True},
                    "resources": {},
                    "healthcheckPort": 51516,
                },
            },
            "affinity": _NFD_AFFINITY,
            "networkPolicy": {"enabled": False},
        },
    }


UNDOCUMENTED = (
    "namespace",
    "nvidiaCtkPath",
    "maskNvidiaDriverParams",
    "webhook.serviceAccount.annotations",
)
"""Keys NVIDIA's v25.12.0 templates read that its values.yaml does not list (``.Values.<key>``)."""


def nfd_affinity() -> dict[str, Any]:
    """NVIDIA's default plugin affinity (NFD's NVIDIA labels, or nvidia.com/gpu.present)."""
    return _NFD_AFFINITY


def key_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    """Every documented key as a dotted path (maps descended; lists and empty maps are leaves)."""
    out: list[str] = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and not path.endswith("affinity"):
            out += key_paths(value, f"{path}.")
        else:
            out.append(path)
    return out
