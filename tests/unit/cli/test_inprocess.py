"""``cli.inprocess``: a component command's parameters from a container's argv and env."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest

from compute_domains.cli import daemon as daemon_cli
from compute_domains.cli import inprocess
from compute_domains.cli import plugin as plugin_cli
from compute_domains.containers import runtime, virtual
from compute_domains.daemon import imexconfig

PLUGIN_ENV = {"NODE_NAME": "n1", "POD_NAMESPACE": "drv", "CHANNEL_SLOTS": "4"}


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        pytest.param([], PLUGIN_ENV, {"node_name": "n1", "namespace": "drv"}, id="env"),
        pytest.param(
            ["--node-name", "flag"], PLUGIN_ENV, {"node_name": "flag"}, id="flag-beats-env"
        ),
        pytest.param(
            [], {"NODE_NAME": "n1", "NAMESPACE": "second"}, {"namespace": "second"}, id="2nd-var"
        ),
        pytest.param([], PLUGIN_ENV, {"channel_slots": 4, "cleanup_interval": 300.0}, id="types"),
        pytest.param(
            [], {**PLUGIN_ENV, "STRICT_FABRIC": "false"}, {"strict_fabric": False}, id="env-bool"
        ),
        pytest.param(["--no-strict-fabric"], PLUGIN_ENV, {"strict_fabric": False}, id="flag-bool"),
        pytest.param(
            [],
            {**PLUGIN_ENV, "PROC_DEVICES_PATH": "/host/proc/devices"},
            {"proc_devices_path": Path("/host/proc/devices"), "metrics_port": None},
            id="path-and-unset-default",
        ),
        pytest.param(
            [], {**PLUGIN_ENV, "LOG_VERBOSITY": "06"}, {"log_level": "6"}, id="callback-runs"
        ),
    ],
)
def test_parameters_come_from_flags_then_the_container_env_then_defaults(
    args: list[str], env: dict[str, str], expected: dict[str, Any]
) -> None:
    values = inprocess.resolve(plugin_cli.run, args, env)
    assert {k: values[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        pytest.param([], PLUGIN_ENV, False, id="default-off"),
        pytest.param([], {**PLUGIN_ENV, "SHARED_IMEX_EAGER": "true"}, True, id="env"),
        pytest.param(["--shared-imex-eager"], PLUGIN_ENV, True, id="flag"),
    ],
)
def test_the_eager_shared_imex_setting_comes_from_its_flag_or_env(
    args: list[str], env: dict[str, str], expected: bool
) -> None:
    settings = plugin_cli.plugin_settings(inprocess.resolve(plugin_cli.run, args, env))
    assert settings.shared_imex_eager is expected


def test_this_process_environment_is_never_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "from-this-process")
    monkeypatch.setenv("CHANNEL_SLOTS", "2")
    values = inprocess.resolve(plugin_cli.run, [], {"NODE_NAME": "n1"})
    assert values["node_name"] == "n1" and values["channel_slots"] == 8


@pytest.mark.parametrize(
    ("args", "env", "match"),
    [
        pytest.param([], {}, "node_name", id="required-missing"),
        pytest.param(["--bogus"], PLUGIN_ENV, "bogus", id="unknown-flag"),
        pytest.param(["extra"], PLUGIN_ENV, "extra", id="extra-argument"),
        pytest.param([], {**PLUGIN_ENV, "CHANNEL_SLOTS": "x"}, "x", id="invalid-env-value"),
    ],
)
def test_a_bad_command_line_is_a_usage_error(
    args: list[str], env: dict[str, str], match: str
) -> None:
    with pytest.raises(click.UsageError, match=match):
        inprocess.resolve(plugin_cli.run, args, env)


def test_daemon_parameters_build_its_settings() -> None:
    env = {
        "NODE_NAME": "n1",
        "POD_IP": "127.0.0.5",
        "POD_UID": "u",
        "POD_NAME": "p",
        "POD_NAMESPACE": "drv",
        "COMPUTE_DOMAIN_UUID": "cd-uid",
        "COMPUTE_DOMAIN_NAME": "cd",
        "CLIQUE_ID": "c.1",
        "MAX_NODES_PER_IMEX_DOMAIN": "4",
    }
    opts = inprocess.resolve(inprocess.daemon_command(), [], env)
    settings = daemon_cli.daemon_settings(opts)
    assert settings.identity.clique_id == "c.1" and settings.max_nodes == 4
    assert settings.imex.config_path == Path("/imexd/imexd.cfg")
    # Peer names unique to the domain by default (decision 0016) ...
    assert settings.imex_domain_identity == "cd-uid"
    # ... NVIDIA's in a domain taken over from NVIDIA's driver (decision 0021).
    taken = inprocess.resolve(inprocess.daemon_command(), [], {**env, "IMEX_PEER_NAMES": "NVIDIA"})
    settings = daemon_cli.daemon_settings(taken)
    assert settings.nvidia_peer_names and settings.imex_domain_identity == ""
    names = imexconfig.dns_nodes_config(2, settings.imex_domain_identity)
    assert "compute-domain-daemon-0001" in names, names
    with pytest.raises(click.UsageError, match="'theirs' is not one of 'domain', 'nvidia'"):
        inprocess.resolve(inprocess.daemon_command(), [], {**env, "IMEX_PEER_NAMES": "theirs"})


def _view(*mounts: tuple[str, str], env: dict[str, str] | None = None) -> virtual.View:
    return virtual.View(
        argv=("cdctl",),
        env=env or {},
        mounts=tuple(runtime.Mount(source=s, target=t) for s, t in mounts),
    )


def test_the_node_root_is_where_host_folders_are_mounted_at_their_own_paths() -> None:
    view = _view(
        ("/n/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins"),
        ("/n/var/run/cdi", "/var/run/cdi"),
    )
    paths = (Path("/var/lib/kubelet/plugins"), Path("/var/run/cdi"))
    assert inprocess.node_root(view, paths) == Path("/n")


@pytest.mark.parametrize(
    "mounts",
    [
        pytest.param((("/n/elsewhere", "/var/run/cdi"),), id="not-at-its-own-path"),
        pytest.param(
            (("/a/var/run/cdi", "/var/run/cdi"), ("/b/etc/cdi", "/etc/cdi")), id="two-roots"
        ),
    ],
)
def test_host_folders_not_mirrored_are_refused(mounts: tuple[tuple[str, str], ...]) -> None:
    with pytest.raises(click.UsageError):
        inprocess.node_root(_view(*mounts), (Path("/var/run/cdi"), Path("/etc/cdi")))


def test_in_cluster_names_the_pods_service_account_and_api_server() -> None:
    view = _view(
        ("/n/pods/x/token-vol", inprocess.SERVICE_ACCOUNT),
        env={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"},
    )
    opts: dict[str, Any] = {"kubeconfig": None}
    inprocess.in_cluster(opts, view)
    assert opts["service_account_dir"] == Path("/n/pods/x/token-vol")
    assert opts["api_server"] == "https://127.0.0.1:6443"


def test_a_kubeconfig_is_translated_instead() -> None:
    view = _view(("/n/etc/kube", "/etc/kube"))
    opts: dict[str, Any] = {"kubeconfig": Path("/etc/kube/config")}
    inprocess.in_cluster(opts, view)
    assert opts == {"kubeconfig": Path("/n/etc/kube/config")}


@pytest.mark.parametrize(
    ("argv", "path_has_ours", "expected"),
    [
        pytest.param(("cdctl", "plugin", "run"), True, "run_plugin", id="plugin"),
        pytest.param(("cdctl", "daemon", "run", "-v"), True, "run_daemon", id="daemon"),
        pytest.param(("cdctl", "agent", "run"), True, "run_agent", id="agent"),
        pytest.param(("cdctl", "daemon", "check"), True, None, id="other-command"),
        pytest.param(("cdctl", "plugin", "run"), False, None, id="another-installation"),
        pytest.param(("sh", "-c", "x"), True, None, id="other-program"),
    ],
)
def test_only_this_installations_component_commands_run_in_process(
    tmp_path: Path, argv: tuple[str, ...], path_has_ours: bool, expected: str | None
) -> None:
    ours, other = tmp_path / "ours", tmp_path / "other"
    for folder in (ours, other):
        folder.mkdir()
        (folder / "cdctl").write_text("#!/bin/sh\n")
        (folder / "cdctl").chmod(0o755)
    lookup = inprocess.programs(ours)
    path = f"{ours if path_has_ours else other}:/usr/bin"
    found = lookup(virtual.View(argv=argv, env={"PATH": path}, mounts=()))
    assert (found.__name__ if found else None) == expected
