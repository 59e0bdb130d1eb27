"""``cdctl controller run``: flags and environment map to settings; bad settings fail early."""

from __future__ import annotations

from click.testing import CliRunner

from compute_domains.cli import controller as cli_controller


def test_help_names_the_environment_variables() -> None:
    result = CliRunner().invoke(cli_controller.group, ["run", "--help"])
    assert result.exit_code == 0
    for env in (
        "POD_NAMESPACE",
        "KUBECONFIG",
        "IMAGE_NAME",
        "MAX_NODES_PER_IMEX_DOMAIN",
        "METRICS_PORT",
        "IMEX_AGENTS",
        "IMEX_SCOPE",
    ):
        assert env in result.output


def test_image_is_required() -> None:
    result = CliRunner().invoke(cli_controller.group, ["run"], env={"IMAGE_NAME": ""})
    assert result.exit_code != 0
    assert "IMAGE_NAME" in result.output or "--image" in result.output


def test_invalid_values_are_rejected_before_anything_runs() -> None:
    result = CliRunner().invoke(
        cli_controller.group,
        ["run", "--image", "img:1", "--max-nodes-per-imex-domain", "0"],
    )
    assert result.exit_code == 2
    assert "max-nodes-per-imex-domain" in result.output


def test_a_per_clique_default_without_resident_agents_fails_before_anything_runs() -> None:
    result = CliRunner().invoke(
        cli_controller.group, ["run", "--image", "img:1"], env={"IMEX_SCOPE": "perClique"}
    )
    assert result.exit_code != 0
    assert "resident" in str(result.exception or result.output)
