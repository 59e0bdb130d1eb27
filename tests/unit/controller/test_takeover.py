"""Which daemon DaemonSets and pods are NVIDIA's, and the DaemonSet that takes theirs over."""

from __future__ import annotations

from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Pod

from compute_domains.controller import config, daemonset, takeover

UID = "c4bec02a-b317-4e07-a238-18c80f3598ef"


def _ours() -> DaemonSet:
    settings = config.DaemonSettings(image="ghcr.io/compute-domains/compute-domains:test")
    return daemonset.render(domain_uid=UID, namespace="ns", settings=settings)


def _nvidias() -> DaemonSet:
    ds = _ours()
    assert ds.spec is not None and ds.spec.template.spec is not None
    ds.spec.template.spec.containers[0].command = ["compute-domain-daemon", "-v", "4", "run"]
    return ds


def _pod(command: list[str], *, terminating: bool = False) -> Pod:
    meta = {"name": f"p-{command[0]}", "deletionTimestamp": "2026-12-06T00:00:00Z"}
    if not terminating:
        meta.pop("deletionTimestamp")
    return Pod.from_dict(
        {"metadata": meta, "spec": {"containers": [{"name": "c", "command": command}]}}
    )


def test_only_nvidias_template_is_nvidias() -> None:
    assert takeover.is_nvidias(_nvidias())
    assert not takeover.is_nvidias(_ours())


def test_nvidias_live_pods_are_named() -> None:
    pods = [
        _pod(["compute-domain-daemon", "run"]),
        _pod(["cdctl", "daemon", "run"]),
        _pod(["compute-domain-daemon", "check"], terminating=True),
    ]
    assert takeover.nvidias_pods(pods) == ["p-compute-domain-daemon"]


def test_the_taking_over_daemonset_keeps_pods_and_joins_nvidias_imex_domain() -> None:
    plain = _ours()
    assert plain.spec is not None and plain.spec.updateStrategy is None
    taking = takeover.keep_running(_ours())
    assert taking.spec is not None and taking.spec.updateStrategy is not None
    assert taking.spec.updateStrategy.type == "OnDelete"
    env = {e.name: e.value for e in taking.spec.template.spec.containers[0].env or []}  # type: ignore[union-attr]
    assert env["IMEX_PEER_NAMES"] == "nvidia"
    # Everything else is the ordinary rendering.
    taking.spec.updateStrategy = None
    taking.spec.template.spec.containers[0].env.pop()  # type: ignore[union-attr]
    assert taking.to_dict() == plain.to_dict()
