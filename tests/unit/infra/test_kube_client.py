"""``infra.kube.client.load_config``: in-cluster with an explicit API server."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from lightkube.resources.core_v1 import ConfigMap

from compute_domains.infra import errors
from compute_domains.infra import kube as client
from compute_domains.sim import pki


def test_an_explicit_api_server_uses_the_given_service_account(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("tok")
    (tmp_path / "namespace").write_text("drv")
    (tmp_path / "ca.crt").write_text("-")
    cfg = client.load_config(
        client.KubeSettings(service_account_dir=tmp_path, api_server="https://127.0.0.9:6443")
    ).get()
    assert cfg is not None and cfg.user is not None
    assert cfg.cluster.server == "https://127.0.0.9:6443"
    assert cfg.cluster.certificate_auth == str(tmp_path / "ca.crt")
    assert cfg.user.token == "tok" and cfg.namespace == "drv"


def test_a_missing_token_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError):
        client.load_config(
            client.KubeSettings(service_account_dir=tmp_path, api_server="https://127.0.0.9:1")
        )


def _pool(c: object) -> Any:
    # lightkube AsyncClient → its GenericAsyncClient → the httpx client → transport → pool.
    return c._client._client._transport._pool  # type: ignore[attr-defined]


def test_a_client_may_keep_idle_connections_past_httpx_five_seconds(tmp_path: Path) -> None:
    """A sim kubelet renews its Lease every 10 s: with httpx's 5 s every renewal reconnected."""
    (tmp_path / "token").write_text("tok")
    (tmp_path / "namespace").write_text("drv")
    (tmp_path / "ca.crt").write_bytes(pki.new_ca().cert_pem)
    base = client.KubeSettings(service_account_dir=tmp_path, api_server="https://127.0.0.9:6443")
    kept = client.client(dataclasses.replace(base, keepalive_s=120.0))
    default = client.client(base)
    assert _pool(kept)._keepalive_expiry == 120.0
    assert _pool(default)._keepalive_expiry == 5.0
    # The transport that replaces the client's own still verifies the API server with the CA.
    assert _pool(kept)._ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert not _pool(kept)._http2 and not _pool(default)._http2
    shared = client.client(dataclasses.replace(base, http2=True))
    assert _pool(shared)._http2 and _pool(shared)._keepalive_expiry == 5.0


async def test_a_request_whose_answer_never_comes_times_out(tmp_path: Path) -> None:
    """A plain request (not a watch) read with no bound hung its caller for good when no answer
    came; now it fails after ``read_timeout_s`` with an error the callers translate and retry."""
    got: list[bytes] = []
    release = asyncio.Event()
    handlers: list[asyncio.Task[Any]] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        got.append(await reader.readline())  # reads the request line, never answers
        await release.wait()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    (tmp_path / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    settings = client.KubeSettings(kubeconfig=tmp_path / "kubeconfig", read_timeout_s=0.3)
    api = client.client(settings)
    try:
        async with asyncio.timeout(10):
            with pytest.raises(httpx.ReadTimeout):
                await api.get(ConfigMap, "x", namespace="default")
    finally:
        release.set()
        await api.close()
        server.close()
        await server.wait_closed()
        await asyncio.gather(*handlers)
    assert got and got[0].startswith(b"GET /api/v1/namespaces/default/configmaps/x")
    failure = client.translate(httpx.ReadTimeout("read"), "get x")
    assert isinstance(failure, errors.TemporaryError)
