"""Log levels: the four names and NVIDIA's klog verbosities map onto Python logging levels."""

from __future__ import annotations

import logging

import httpx2 as httpx
import pytest

from compute_domains.infra import logs


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("debug", logging.DEBUG),
        ("INFO", logging.INFO),
        (" warning ", logging.WARNING),
        ("error", logging.ERROR),
        ("0", logging.INFO),
        ("1", logs.V1),
        ("2", logs.V2),
        ("3", logs.V3),
        ("4", logging.DEBUG),
        ("6", logging.DEBUG),
        ("10", logging.DEBUG),
        ("06", logging.DEBUG),
    ],
)
def test_names_and_klog_verbosities_map_to_levels(text: str, level: int) -> None:
    assert logs.level_number(text) == level


def test_detail_levels_sit_between_info_and_debug_in_klog_order() -> None:
    assert logging.DEBUG < logs.V3 < logs.V2 < logs.V1 < logging.INFO


@pytest.mark.parametrize("text", ["11", "-1", "verbose", "", "4.5", "warn"])
def test_other_values_are_refused_with_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match=r"level name \(debug, info, warning, error\).*0\.\.10"):
        logs.level_number(text)


@pytest.mark.usefixtures("root_restored")
@pytest.mark.parametrize(
    ("level", "shown"),
    [
        ("0", {"info"}),
        ("1", {"info", "v1"}),
        ("2", {"info", "v1", "v2"}),
        ("3", {"info", "v1", "v2", "v3"}),
        ("6", {"info", "v1", "v2", "v3", "debug"}),
        ("info", {"info"}),
        ("debug", {"info", "v1", "v2", "v3", "debug"}),
    ],
)
def test_setup_shows_exactly_the_lines_of_its_verbosity(level: str, shown: set[str]) -> None:
    logs.setup(level)
    log = logging.getLogger("test.verbosity")
    enabled = {
        name
        for name, number in (
            ("info", logging.INFO),
            ("v1", logs.V1),
            ("v2", logs.V2),
            ("v3", logs.V3),
            ("debug", logging.DEBUG),
        )
        if log.isEnabledFor(number)
    }
    assert enabled == shown


@pytest.mark.usefixtures("root_restored")
def test_detail_lines_are_labelled_with_their_verbosity(capsys: pytest.CaptureFixture[str]) -> None:
    logs.setup("2", "json")
    logging.getLogger("test.verbosity").log(logs.V2, "Caches populated")
    assert '"level": "v2"' in capsys.readouterr().err


def _one_request(url: str) -> None:
    """One GET through the HTTP library lightkube uses, answered in-process."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={}))
    with httpx.Client(transport=transport) as client:
        client.get(url)


@pytest.mark.usefixtures("root_restored")
@pytest.mark.parametrize("level", ["6", "10"])
def test_from_verbosity_6_each_response_is_traced_in_client_gos_words(
    level: str, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.setup(level)
    _one_request("https://api.test/api/v1/pods?limit=1")
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "Response" in ln]
    assert " DEBUG " in line
    assert (
        'round_trippers.go: "Response" verb="GET" url="https://api.test/api/v1/pods?limit=1" '
        'status="200 OK"'
    ) in line


@pytest.mark.usefixtures("root_restored")
@pytest.mark.parametrize("level", ["0", "4", "5", "info", "debug"])
def test_below_verbosity_6_requests_are_not_logged(
    level: str, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.setup(level)
    _one_request("https://api.test/api/v1/pods")
    err = capsys.readouterr().err
    assert "api.test" not in err
    assert "round_trippers.go" not in err
