"""The stand-in nvidia-imex's command line: the drivers' ``-c <cfg>`` (and the simulator's
``--hosts-file``) are read without argparse into exactly the options argparse's parse gives;
anything else is left to argparse."""

from __future__ import annotations

import pytest

from compute_domains.sim import imex


@pytest.mark.parametrize(
    "argv",
    [
        ["-c", "/imexd/imexd.cfg"],
        ["-c", "/x.cfg", "--hosts-file", "/run/hosts"],
        ["--hosts-file", "/run/hosts", "-c", "/x.cfg"],
        ["--hosts-file", "/run/hosts"],
        [],
    ],
)
def test_the_drivers_command_lines_read_as_argparse_reads_them(argv: list[str]) -> None:
    quick = imex._quick_imex(argv)
    assert quick is not None
    assert quick == imex.imex_options(imex.parse_imex(argv))


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["-c"],
        ["-c", "/x.cfg", "--nogpu"],
        ["-c", "/x.cfg", "-c", "/y.cfg"],
        ["--hosts", "/run/hosts", "-c", "/x.cfg"],  # argparse's abbreviation
        ["-c", "--nogpu"],
        ["-c", ""],
        ["-c/x.cfg"],
        ["-c", "/x.cfg", "--local-address", "127.0.0.1"],
    ],
)
def test_any_other_command_line_is_left_to_argparse(argv: list[str]) -> None:
    assert imex._quick_imex(argv) is None
