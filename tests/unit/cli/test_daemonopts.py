"""``cdctl daemon run``'s click-free parser reads exactly what the click command reads.

Each case runs the click command (built from the same table) with ``run`` captured, and
``daemonopts.parse`` on the same command line and environment: both give the same options, or
``parse`` declines (None) and click is the one that answers (help, usage error).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from compute_domains.cli import daemon, daemonopts

_ENV_NAMES = sorted(
    {name for opt in daemonopts.RUN_OPTIONS for name in opt.env} | {daemonopts.ROOT_LEVEL_ENV}
)


def _click(argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """(exit code, the options click passed to ``run``, or None)."""
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(daemon, "run", seen.append)
    full_env: dict[str, str | None] = dict.fromkeys(_ENV_NAMES)
    full_env.update(env)
    res = CliRunner().invoke(daemon.group, ["run", *argv], env=full_env)
    return res.exit_code, (seen[0] if seen else None)


ACCEPTED: list[tuple[list[str], dict[str, str]]] = [
    ([], {}),
    (
        [],
        {
            "CLIQUE_ID": "u.1",
            "NODE_NAME": "n1",
            "POD_IP": "10.0.0.1",
            "POD_UID": "uid",
            "POD_NAME": "p",
            "POD_NAMESPACE": "ns",
            "COMPUTE_DOMAIN_UUID": "cd-uid",
            "COMPUTE_DOMAIN_NAME": "cd",
            "COMPUTE_DOMAIN_NAMESPACE": "team",
            "MAX_NODES_PER_IMEX_DOMAIN": "4",
            "LOG_VERBOSITY": "06",
            "METRICS_PORT": "50000",
            "KUBECONFIG": "/nonexistent/kubeconfig",
            "SHUTDOWN_TIMEOUT": "3.5",
        },
    ),
    # A flag beats its variable; an empty variable counts as unset; the last flag wins.
    (["--node-name", "flag", "--pod-ip=10.1.1.1"], {"NODE_NAME": "env", "POD_IP": ""}),
    (["--max-nodes-per-imex-domain", "2", "--max-nodes-per-imex-domain", "3"], {}),
    # The first non-empty of several variables; choices compare case-insensitively.
    ([], {"LOG_FORMAT": "", "CD_LOG_FORMAT": "JSON"}),
    (["--log-format", "Text"], {"LOG_FORMAT": "json"}),
    (["--log-level", " Debug "], {"LOG_VERBOSITY": "3"}),
    (
        [
            "--cliqueid=c.2",
            "--imex-config",
            "/x/imexd.cfg",
            "--imex-nodes-config",
            "/x/nodes.cfg",
            "--imex-config-template",
            "/x/t",
            "--hosts-file",
            "/x/hosts",
            "--imex-binary",
            "imex",
            "--imex-ctl",
            "ctl",
            "--imex-stop-grace",
            "0.1",
            "--metrics-port",
            "0",
            "--unfilled-slot-address",
            "127.0.0.2",
            "--compute-domain-uuid",
            "u",
            "--compute-domain-name",
            "n",
            "--compute-domain-namespace",
            "ns",
            "--pod-uid",
            "x",
            "--pod-name",
            "p",
            "--pod-namespace",
            "d",
            "--kubeconfig",
            "/x/kc",
            "--shutdown-timeout",
            "1",
        ],
        {},
    ),
]


@pytest.mark.parametrize(("argv", "env"), ACCEPTED)
def test_same_options_as_click(
    argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, expected = _click(argv, env, monkeypatch)
    assert code == 0 and expected is not None
    assert daemonopts.parse(argv, env) == expected


REFUSED: list[tuple[list[str], dict[str, str]]] = [
    (["--help"], {}),
    (["-h"], {}),
    (["--no-such-flag", "x"], {}),
    (["stray"], {}),
    (["--node-name"], {}),
    (["--metrics-port", "65536"], {}),
    (["--metrics-port", "http"], {}),
    ([], {"METRICS_PORT": "-1"}),
    (["--max-nodes-per-imex-domain", "0"], {}),
    (["--imex-stop-grace", "0.01"], {}),
    (["--shutdown-timeout", "0.5"], {}),
    (["--log-format", "yaml"], {}),
    ([], {"LOG_VERBOSITY": "loud"}),
    (["--imex-config", "/"], {}),
]


@pytest.mark.parametrize(("argv", "env"), REFUSED)
def test_click_answers_what_parse_declines(
    argv: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert daemonopts.parse(argv, env) is None
    code, ran = _click(argv, env, monkeypatch)
    if argv[:1] == ["--help"]:
        assert code == 0 and ran is None
    else:
        assert code != 0 and ran is None


def test_a_bad_root_level_goes_to_click(monkeypatch: pytest.MonkeyPatch) -> None:
    """``cdctl`` itself refuses a bad ``CD_LOG_LEVEL`` before ``daemon run`` runs."""
    from compute_domains.cli import main

    env = {daemonopts.ROOT_LEVEL_ENV: "11"}
    assert daemonopts.parse([], env) is None
    monkeypatch.setattr(daemon, "run", lambda opts: None)
    res = CliRunner().invoke(main.cli, ["daemon", "run"], env=env)
    assert res.exit_code == 2, res.output


def test_a_value_looking_like_a_flag_goes_to_click(monkeypatch: pytest.MonkeyPatch) -> None:
    assert daemonopts.parse(["--pod-name", "--pod-ip"], {}) is None


def test_defaults_are_converted_as_click_does() -> None:
    opts = daemonopts.parse([], {})
    assert opts is not None
    assert opts["imex_config"] == Path("/imexd/imexd.cfg")
    assert opts["max_nodes_per_imex_domain"] == 18
    assert opts["kubeconfig"] is None
    assert opts["log_verbosity"] == "info"
