"""``infra.kube.client.load_config``: in-cluster with an explicit API server."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube.core.exceptions import ConfigError

from compute_domains.infra import kube as client


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
    with pytest.raises(ConfigError):
        client.load_config(
            client.KubeSettings(service_account_dir=tmp_path, api_server="https://127.0.0.9:1")
        )
