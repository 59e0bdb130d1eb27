"""The command lines a simulated cluster's control plane components run with.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler, each on loopback only, with
the sim's own certificates and the timings of ``controlplane.ControlPlaneSettings`` (how soon a
silent node turns NotReady and its pods are evicted). ``controlplane.ControlPlane`` starts them
in this order and watches them; a binary that is not built is a ``SimError`` saying so.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from compute_domains.sim import errors

if TYPE_CHECKING:
    from compute_domains.sim.controlplane import ControlPlaneSettings

SERVICE_CIDR = "10.0.0.0/24"
"""Virtual ClusterIP range; nothing is ever sent there, the API server only allocates from it."""
CLIENT_QPS = 200
"""Client rate limit of kube-controller-manager and kube-scheduler towards the API server.
Upstream's defaults (20 and 50 requests/s) are for a shared production API server; a sim of
1,152 nodes has the DaemonSet controller create 1,152 plugin pods (plus an Event each) and the
scheduler bind them, which at 20/s alone took minutes. Large clusters raise these the same way."""
CLIENT_BURST = 400
"""Their burst above ``CLIENT_QPS``."""
MAX_INFLIGHT = (1600, 800)
"""kube-apiserver's ``--max-requests-inflight`` and ``--max-mutating-requests-inflight``: the
seats API Priority and Fairness shares out (upstream 400 and 200). With upstream's, 1,152
kubelets starting their plugin pods filled the ``node-high`` level's 98 seats and Lease renewals
were refused with 429; large clusters raise them the same way."""

SCHEDULER_FEATURE_GATES = "SchedulerAsyncPreemption=false"
"""kube-scheduler's preemption as docs/troubleshooting.md asks of a 1.34 cluster with placeholder
spares. v1.34.4's asynchronous preemption (beta, on by default) takes the preemptor out of its
"preempting" set before its last victim is marked and deleted (kubernetes/kubernetes#134249,
fixed by #134730 after 1.34), so the preemptor can be tried again, find no terminating victim
on its node, and preempt on another: one replacement rank took both of rack a's placeholders,
10 ms apart, in ``tests/e2e/test_two_domain_64plus8.py``. Synchronous preemption marks and
deletes every victim before the preemptor can be tried again."""


def _bin(settings: ControlPlaneSettings, name: str) -> str:
    path = settings.bin_dir / name
    if not path.exists():
        raise errors.SimError(f"{name} is not built ({path} missing): run `make setup`")
    return str(path)


def etcd_argv(settings: ControlPlaneSettings, url: str, peer_port: int) -> list[str]:
    """etcd serving ``url`` (peers on ``peer_port``), data in the state folder."""
    peer = f"http://127.0.0.1:{peer_port}"
    return [
        _bin(settings, "etcd"),
        "--name",
        "sim",
        "--data-dir",
        str(settings.state_dir / "etcd"),
        "--listen-client-urls",
        url,
        "--advertise-client-urls",
        url,
        "--listen-peer-urls",
        peer,
        "--initial-advertise-peer-urls",
        peer,
        "--initial-cluster",
        f"sim={peer}",
        "--initial-cluster-state",
        "new",
        # A throw-away test store: durability costs fsyncs the simulator does not need.
        "--unsafe-no-fsync",
        "--log-level",
        "warn",
    ]


def apiserver_argv(
    settings: ControlPlaneSettings, port: int, etcd_url: str, tls: Path
) -> list[str]:
    """kube-apiserver on ``port``: the sim's certificates under ``tls``, Node and RBAC
    authorization, NodeRestriction, the settings' toleration of not-ready nodes."""
    tol = str(settings.eviction_toleration_s)
    return [
        _bin(settings, "kube-apiserver"),
        f"--etcd-servers={etcd_url}",
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--cert-dir={settings.state_dir / 'apiserver-certs'}",
        f"--tls-cert-file={tls / 'apiserver.crt'}",
        f"--tls-private-key-file={tls / 'apiserver.key'}",
        f"--client-ca-file={tls / 'ca.crt'}",
        f"--kubelet-client-certificate={tls / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={tls / 'apiserver-kubelet-client.key'}",
        f"--kubelet-certificate-authority={tls / 'ca.crt'}",
        "--kubelet-preferred-address-types=InternalIP",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={tls / 'sa.crt'}",
        f"--service-account-signing-key-file={tls / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        f"--default-not-ready-toleration-seconds={tol}",
        f"--default-unreachable-toleration-seconds={tol}",
        f"--max-requests-inflight={MAX_INFLIGHT[0]}",
        f"--max-mutating-requests-inflight={MAX_INFLIGHT[1]}",
        # /debug/pprof for a scale run to name the function that spends the time
        # (bench/pprof_fetch.py); it needs the admin identity and costs nothing unasked.
        "--profiling=true",
        f"--v={settings.verbosity}",
    ]


def controller_manager_argv(
    settings: ControlPlaneSettings, port: int, kubeconfig: Path, tls: Path
) -> list[str]:
    """kube-controller-manager on ``port``: every controller, no leader election, the settings'
    node monitor grace period."""
    return [
        _bin(settings, "kube-controller-manager"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        f"--cert-dir={settings.state_dir / 'controller-manager-certs'}",
        f"--service-account-private-key-file={tls / 'sa.key'}",
        f"--root-ca-file={tls / 'ca.crt'}",
        "--use-service-account-credentials=true",
        "--controllers=*",
        "--leader-elect=false",
        f"--kube-api-qps={CLIENT_QPS}",
        f"--kube-api-burst={CLIENT_BURST}",
        "--node-monitor-period=1s",
        f"--node-monitor-grace-period={settings.node_monitor_grace_s}s",
        "--profiling=false",
        f"--v={settings.verbosity}",
    ]


def scheduler_argv(settings: ControlPlaneSettings, port: int, kubeconfig: Path) -> list[str]:
    """kube-scheduler on ``port``, no leader election."""
    return [
        _bin(settings, "kube-scheduler"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        f"--cert-dir={settings.state_dir / 'scheduler-certs'}",
        "--leader-elect=false",
        # Deprecated in favour of a config file's clientConnection, still honoured without one.
        f"--kube-api-qps={CLIENT_QPS}",
        f"--kube-api-burst={CLIENT_BURST}",
        f"--feature-gates={SCHEDULER_FEATURE_GATES}",
        # /debug/pprof for a scale run to name the function that spends the time
        # (bench/pprof_fetch.py); it needs the admin identity and costs nothing unasked.
        "--profiling=true",
        f"--v={settings.verbosity}",
    ]
