"""Log levels on the command line and in the environment: names and NVIDIA's klog numbers.

NVIDIA's chart sets ``logVerbosity`` (default ``"4"``) into ``LOG_VERBOSITY`` and
``LOG_VERBOSITY_CD_DAEMON``; every component command accepts those numbers as well as the
level names, and refuses anything else before it starts (not in a crash loop later).
"""

from __future__ import annotations

import logging

import click
import pytest
from click.testing import CliRunner

from compute_domains.cli import controller as cli_controller
from compute_domains.cli import main as cli_main
from compute_domains.cli import serving


@click.command()
@serving.log_options
def _echo(log_level: str, log_format: str) -> None:
    click.echo(f"level={log_level} format={log_format}")


@pytest.mark.parametrize(
    ("env", "shown"),
    [
        ({"LOG_VERBOSITY": "6"}, "level=6"),
        ({"LOG_VERBOSITY": "0"}, "level=0"),
        ({"LOG_VERBOSITY": "04"}, "level=4"),
        ({"LOG_VERBOSITY": "DEBUG"}, "level=debug"),
        ({"LOG_LEVEL": "warning", "LOG_VERBOSITY": "6"}, "level=warning"),
        ({}, "level=info"),
    ],
)
def test_component_log_level_takes_names_and_klog_numbers(env: dict[str, str], shown: str) -> None:
    result = CliRunner().invoke(_echo, [], env={"LOG_LEVEL": None, "LOG_VERBOSITY": None, **env})
    assert result.exit_code == 0, result.output
    assert shown in result.output


@pytest.mark.parametrize("value", ["11", "-1", "verbose", "2.5"])
def test_a_bad_level_is_a_usage_error_naming_what_is_accepted(value: str) -> None:
    result = CliRunner().invoke(_echo, ["--log-level", value])
    assert result.exit_code == 2
    assert "--log-level" in result.output
    assert "klog verbosity 0..10" in result.output


def test_controller_refuses_a_bad_daemon_level_from_its_environment() -> None:
    result = CliRunner().invoke(
        cli_controller.group,
        ["run", "--image", "img:1"],
        env={"LOG_VERBOSITY_CD_DAEMON": "loud"},
    )
    assert result.exit_code == 2
    assert "--daemon-log-level" in result.output


def test_controller_accepts_a_numeric_daemon_level() -> None:
    # An invalid flag declared after the level stops the command before it runs: the level
    # itself must have passed (click converts parameters in declaration order).
    result = CliRunner().invoke(
        cli_controller.group,
        ["run", "--image", "img:1", "--workers", "0"],
        env={"LOG_VERBOSITY_CD_DAEMON": "0", "LOG_VERBOSITY": "6"},
    )
    assert result.exit_code == 2
    assert "--workers" in result.output
    assert "log-level" not in result.output


@pytest.mark.usefixtures("root_restored")
def test_daemon_command_takes_the_numbers_the_controller_passes_on() -> None:
    # The controller puts its daemon level into both LOG_VERBOSITY and CD_LOG_LEVEL (the
    # latter read by cdctl's root group). A bad value declared after the level, also from the
    # environment, stops `daemon run` before it starts: the level itself must have passed.
    result = CliRunner().invoke(
        cli_main.cli,
        ["daemon", "run"],
        env={"CD_LOG_LEVEL": "6", "LOG_VERBOSITY": "6", "MAX_NODES_PER_IMEX_DOMAIN": "0"},
    )
    assert result.exit_code == 2, result.output
    assert "--max-nodes-per-imex-domain" in result.output
    assert "--log-verbosity" not in result.output
    assert logging.getLogger().level == logging.DEBUG


def test_the_help_documents_the_mapping() -> None:
    text = " ".join(CliRunner().invoke(_echo, ["--help"]).output.split())
    assert "klog verbosity 0-10" in text
    assert "4-10: debug" in text
