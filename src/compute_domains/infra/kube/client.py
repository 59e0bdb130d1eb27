"""The one place a lightkube client is constructed, from explicit ``KubeSettings``.

Nothing is auto-detected inside a component: the CLI decides whether a process uses a
kubeconfig file or its pod's ServiceAccount, and passes that decision down.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import SERVICE_ACCOUNT, KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.core.exceptions import ConfigError

from compute_domains.infra import errors


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class KubeSettings:
    """How to reach the Kubernetes API."""

    kubeconfig: Path | None = None
    """A kubeconfig file; None means in-cluster (the pod's ServiceAccount)."""
    service_account_dir: Path | None = None
    """Folder with ``token``, ``ca.crt``, ``namespace`` (in-cluster); None for the standard one."""
    api_server: str | None = None
    """In-cluster only: the API server URL (``https://host:port``) instead of the
    ``KUBERNETES_SERVICE_HOST``/``_PORT`` of this process's environment (a process hosting
    many pods' components passes each pod's own)."""
    field_manager: str = "compute-domains"
    """Field manager name recorded on every write (server-side apply ownership)."""
    timeout_s: float = 30.0
    """Timeout of one API request's connect, write and pool wait, in seconds (watches are
    long-lived and exempt: lightkube gives them no read timeout of their own)."""
    read_timeout_s: float = 90.0
    """How long a request (not a watch) may wait for its response's next bytes. Above the API
    server's own 60 s request timeout, after which it answers 504 itself: it fires only when
    no answer can come (a response lost on its way), which without it hung its caller for good."""
    keepalive_s: float | None = None
    """How long an idle connection is kept for the next request; None: httpx's 5 s. A client
    that writes every 10 s (a kubelet's Lease) keeps its connection with a longer one, as
    client-go keeps its HTTP/2 connection, instead of a new TLS handshake per write."""
    http2: bool = False
    """HTTP/2, as client-go speaks it: every request and watch of the client shares one
    connection (HTTP/1.1 opens one per concurrent request and per watch)."""


def load_config(settings: KubeSettings) -> KubeConfig:
    """The kubeconfig or ServiceAccount configuration the settings name.

    Raises:
        errors.ConfigError: it cannot be loaded (a missing or unreadable kubeconfig, no
            ServiceAccount outside a pod): a project error, so a command says so in one line
            instead of lightkube's traceback, and a component stops at its start with the reason.
    """
    try:
        return _load_config(settings)
    except ConfigError as err:
        where = settings.kubeconfig or "the pod's ServiceAccount"
        raise errors.ConfigError(
            f"cannot load the Kubernetes configuration from {where}: {err}"
        ) from err


def _load_config(settings: KubeSettings) -> KubeConfig:
    if settings.kubeconfig is not None:
        return KubeConfig.from_file(settings.kubeconfig)
    if settings.api_server is not None:
        account = settings.service_account_dir or Path(SERVICE_ACCOUNT)
        try:
            token = (account / "token").read_text()
            namespace = (account / "namespace").read_text()
        except FileNotFoundError as err:
            raise ConfigError(str(err)) from err
        return KubeConfig.from_one(
            cluster=Cluster(server=settings.api_server, certificate_auth=str(account / "ca.crt")),
            user=User(token=token, token_file=str(account / "token")),
            namespace=namespace,
        )
    if settings.service_account_dir is not None:
        return KubeConfig.from_service_account(str(settings.service_account_dir))
    return KubeConfig.from_service_account()


def client(settings: KubeSettings) -> AsyncClient:
    """An async client for the API server the settings name."""
    config = load_config(settings)
    transport = None
    if settings.keepalive_s is not None or settings.http2:
        one = config.get()
        if one is None or one.user is None:
            raise errors.ConfigError("the kubeconfig names no current context with a user")
        # The transport replaces the client's own, so it carries the TLS settings too.
        tls = client_adapter.verify_cluster(one.cluster, one.user, one.abs_file, False)
        limits = httpx.Limits(
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0 if settings.keepalive_s is None else settings.keepalive_s,
        )
        transport = httpx.AsyncHTTPTransport(verify=tls, limits=limits, http2=settings.http2)
    return AsyncClient(
        config,
        field_manager=settings.field_manager,
        timeout=httpx.Timeout(settings.timeout_s, read=settings.read_timeout_s),
        trust_env=False,
        transport=transport,
    )
