"""Rendering and writing the IMEX daemon config and the nodes config."""

from __future__ import annotations

from pathlib import Path

import pytest

from compute_domains.api import names
from compute_domains.daemon import imexconfig
from compute_domains.infra import errors
from compute_domains.sim import imex_config

POD_IP = "10.1.2.3"


def _settings(tmp_path: Path, **overrides: object) -> imexconfig.ImexFilesSettings:
    values: dict[str, object] = {
        "config_path": tmp_path / "imexd" / "imexd.cfg",
        "nodes_config_path": tmp_path / "imexd" / "nodes.cfg",
        "template_path": tmp_path / "imexd" / "imexd.cfg.tmpl",
    }
    values.update(overrides)
    return imexconfig.ImexFilesSettings(**values)  # type: ignore[arg-type]


def _parse(text: str) -> dict[str, str]:
    return imex_config.parse_config_text(text)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("LOG_LEVEL", "4"),
        ("LOG_FILE_NAME", ""),
        ("STATS_FILE_NAME", "/var/log/nvidia-imex-stats.log"),
        ("LOG_APPEND_TO_LOG", "0"),
        ("LOG_FILE_MAX_SIZE", "1024"),
        ("LOG_MAX_ROTATE_COUNT", "10"),
        ("LOG_USE_SYSLOG", "0"),
        ("DAEMONIZE", "0"),
        ("BIND_INTERFACE_IP", ""),
        ("SERVER_PORT", "50000"),
        ("IMEX_NODE_CONFIG_FILE", "/imexd/nodes.cfg"),
        ("NETWORK_INTERFACE", ""),
        ("IMEX_WAIT_FOR_QUORUM", "RECOVERY"),
        ("IMEX_ENABLE_AUTH_ENCRYPTION", "0"),
        ("IMEX_AUTH_ENCRYPTION_MODE", "SSL_TLS"),
        ("IMEX_AUTH_SOURCE", ""),
        ("IMEX_SERVER_KEY", ""),
        ("IMEX_CLIENT_CERT_AUTH", ""),
        ("IMEX_SECURITY_TARGET_OVERRIDE", ""),
        ("IMEX_GSS_SERVICE_NAME", "host"),
        ("IMEX_GSS_TIMEOUT_SEC", "30"),
        ("IMEX_GSS_RETRY_INTERVAL_SEC", "5"),
        ("IMEX_GSS_SEC_CONTEXT_LIFETIME_SEC", "-1"),
        ("IMEX_GSS_SHUTDOWN_ON_FAILURE", "0"),
        ("IMEX_CMD_ENABLED", "1"),
        ("IMEX_CMD_BIND_INTERFACE_IP", POD_IP),
        ("IMEX_CMD_PORT", "50005"),
        ("IMEX_CMD_UNIX_DOMAIN_PATH", ""),
        ("IMEX_NODE_DISCONNECTED_GRACE_TIME", "-1"),
    ],
)
def test_default_template_renders_the_upstream_settings(key: str, value: str) -> None:
    text = imexconfig.render_imex_config(
        imexconfig.DEFAULT_TEMPLATE, pod_ip=POD_IP, settings=imexconfig.ImexFilesSettings()
    )
    assert _parse(text)[key] == value
    assert "{{" not in text


def test_ports_and_paths_come_from_settings(tmp_path: Path) -> None:
    settings = _settings(tmp_path, server_port=41000, cmd_port=41005)
    text = imexconfig.render_imex_config(
        imexconfig.DEFAULT_TEMPLATE, pod_ip="127.0.0.5", settings=settings
    )
    config = imex_config.ImexConfig.from_values(Path("x"), _parse(text))
    assert config.server_port == 41000
    assert config.cmd_port == 41005
    assert config.cmd_bind_ip == "127.0.0.5"
    assert config.node_config_file == settings.nodes_config_path
    assert config.log_file_name == "" and not config.daemonize and config.cmd_enabled


@pytest.mark.parametrize(
    "template",
    [
        "IMEX_CMD_BIND_INTERFACE_IP={{ .IMEXCmdBindInterfaceIP }}\n",
        "IMEX_CMD_BIND_INTERFACE_IP={{.IMEXCmdBindInterfaceIP}}\n",
        "IMEX_CMD_BIND_INTERFACE_IP={{- .IMEXCmdBindInterfaceIP -}}\n",
    ],
    ids=["spaced", "tight", "trimmed"],
)
def test_go_template_field_spellings_render(template: str) -> None:
    text = imexconfig.render_imex_config(
        template, pod_ip=POD_IP, settings=imexconfig.ImexFilesSettings()
    )
    assert text == f"IMEX_CMD_BIND_INTERFACE_IP={POD_IP}\n"


def test_unknown_template_field_is_a_config_error() -> None:
    with pytest.raises(errors.ConfigError, match="Bogus"):
        imexconfig.render_template("X={{ .Bogus }}\n", {})


@pytest.mark.parametrize("pod_ip", ["", "not-an-ip", "10.0.0"], ids=["empty", "name", "short"])
def test_invalid_pod_ip_is_a_config_error(pod_ip: str) -> None:
    with pytest.raises(errors.ConfigError):
        imexconfig.render_imex_config(
            imexconfig.DEFAULT_TEMPLATE, pod_ip=pod_ip, settings=imexconfig.ImexFilesSettings()
        )


def test_ipv6_pod_ip_is_accepted() -> None:
    text = imexconfig.render_imex_config(
        imexconfig.DEFAULT_TEMPLATE, pod_ip="fd00::5", settings=imexconfig.ImexFilesSettings()
    )
    assert _parse(text)["IMEX_CMD_BIND_INTERFACE_IP"] == "fd00::5"


@pytest.mark.parametrize(
    ("max_nodes", "first", "last"),
    [
        (1, "compute-domain-daemon-0000", "compute-domain-daemon-0000"),
        (18, "compute-domain-daemon-0000", "compute-domain-daemon-0017"),
    ],
    ids=["one", "nvl72"],
)
def test_dns_nodes_config_lists_every_slot(max_nodes: int, first: str, last: str) -> None:
    text = imexconfig.dns_nodes_config(max_nodes)
    lines = text.split("\n")
    assert lines[-1] == ""  # every line ends in a newline
    assert len(lines) - 1 == max_nodes
    assert (lines[0], lines[-2]) == (first, last)


def test_dns_nodes_config_names_the_domains_slots() -> None:
    uid = "0b9e2f8c-5a41-4d2e-9b1c-aaaaaaaaaaaa"
    lines = imexconfig.dns_nodes_config(18, uid).splitlines()
    assert lines == [names.imex_dns_name(i, uid) for i in range(18)]
    assert not set(lines) & set(imexconfig.dns_nodes_config(18, "another-uid").splitlines())


def test_dns_nodes_config_needs_at_least_one_node() -> None:
    with pytest.raises(errors.ConfigError):
        imexconfig.dns_nodes_config(0)


def test_nodes_config_rejects_entries_with_whitespace() -> None:
    with pytest.raises(errors.ConfigError):
        imexconfig.render_nodes_config(["10.0.0.1", "10.0.0.2 extra"])


def test_write_uses_the_plugin_template_when_present(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    assert settings.template_path is not None
    settings.template_path.parent.mkdir(parents=True)
    settings.template_path.write_text(
        "IMEX_CMD_BIND_INTERFACE_IP={{ .IMEXCmdBindInterfaceIP }}\n"
        "IMEX_NODE_CONFIG_FILE={{ .IMEXDaemonNodesConfigPath }}\n"
    )
    imexconfig.write_imex_config(settings, pod_ip=POD_IP)
    written = settings.config_path.read_text()
    assert written == (
        f"IMEX_CMD_BIND_INTERFACE_IP={POD_IP}\nIMEX_NODE_CONFIG_FILE={settings.nodes_config_path}\n"
    )
    assert settings.config_path.stat().st_mode & 0o777 == 0o644


def test_write_falls_back_to_the_built_in_template(tmp_path: Path) -> None:
    settings = _settings(tmp_path, template_path=None)
    text = imexconfig.write_imex_config(settings, pod_ip=POD_IP)
    assert settings.config_path.read_text() == text
    assert _parse(text)["IMEX_CMD_PORT"] == "50005"
    assert [p.name for p in settings.config_path.parent.iterdir()] == ["imexd.cfg"]


def test_nodes_config_is_written_only_when_it_changes(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    text = imexconfig.dns_nodes_config(3)
    assert imexconfig.write_nodes_config(settings, text)
    assert not imexconfig.write_nodes_config(settings, text)
    assert imexconfig.write_nodes_config(settings, imexconfig.render_nodes_config(["10.0.0.1"]))
    assert settings.nodes_config_path.read_text() == "10.0.0.1\n"


def test_the_workloads_copy_names_the_node_list_as_they_see_it(tmp_path: Path) -> None:
    """A resident agent's IMEX sees the per-CD folder elsewhere than the CD's workloads do."""
    settings = _settings(
        tmp_path,
        template_path=None,
        config_path=tmp_path / "imexd.agent.cfg",
        client_config_path=tmp_path / "imexd.cfg",
    )
    own = imexconfig.write_imex_config(settings, pod_ip=POD_IP)
    client = (tmp_path / "imexd.cfg").read_text()
    assert _parse(own)["IMEX_NODE_CONFIG_FILE"] == str(settings.nodes_config_path)
    assert _parse(client)["IMEX_NODE_CONFIG_FILE"] == "/imexd/nodes.cfg"
    assert {k: v for k, v in _parse(client).items() if k != "IMEX_NODE_CONFIG_FILE"} == {
        k: v for k, v in _parse(own).items() if k != "IMEX_NODE_CONFIG_FILE"
    }
