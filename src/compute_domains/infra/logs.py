"""Logging set-up (text or JSON lines), called once by the CLI and never by components.

Levels: the four names (debug, info, warning, error), or a klog verbosity as NVIDIA's driver
takes it (``-v N``, chart value ``logVerbosity``), 0 to 10. Verbosity 0 is INFO; 1 to 3 add the
few detail lines NVIDIA's tooling expects at those verbosities (``V1``..``V3``, logging levels
19..17, between INFO and DEBUG); 4 and above is DEBUG (klog's "debug detail" range). A name
stays a name: ``info`` shows no V1..V3 line, ``debug`` shows them all.

From verbosity 6 (klog's request-trace level) every API response is logged as client-go's
``round_trippers.go`` logs it (``"Response" verb="GET" url=... status="200 OK"``): the HTTP
library's one line per request, reworded. Below 6, and for level names, those lines are off.
"""

from __future__ import annotations

import json
import logging
import sys
from types import MappingProxyType
from typing import Final, Literal

LogFormat = Literal["text", "json"]

_BOUND_KEYS = (
    "cd",
    "claim",
    "claim_uid",
    "node",
    "pod",
    "child",
    "step",
    "since_start_s",
    "since_prev_s",
)
"""Fields bound to a record (``extra=``) that every line shows: the objects it is about, and the
daemon's start-up step timings (``daemon.steps``)."""

V1: Final = logging.INFO - 1
"""Detail NVIDIA logs at klog verbosity 1 (shown from ``logVerbosity`` 1 and at debug)."""
V2: Final = logging.INFO - 2
"""Detail NVIDIA logs at klog verbosity 2 (informer and per-object event lines)."""
V3: Final = logging.INFO - 3
"""Detail NVIDIA logs at klog verbosity 3 (list-and-watch lines)."""
KLOG_MAX: Final = 10
"""Highest klog verbosity accepted (klog's own scale stops meaning more there)."""
REQUEST_TRACE: Final = 6
"""klog verbosity from which every API response is logged (client-go's request trace)."""
_HTTP_LOGGERS: Final = ("httpx2", "httpx")

_NAMED: Final = MappingProxyType(
    {
        "debug": logging.DEBUG,
        "info": logging.INFO,
        "warning": logging.WARNING,
        "error": logging.ERROR,
    }
)


LEVEL_HELP: Final = (
    "debug|info|warning|error, or a klog verbosity 0-10 as NVIDIA's chart sets it "
    "(0: info; 1-3: info plus NVIDIA's V1-V3 detail lines; 4-10: debug)"
)
"""What :func:`level_number` accepts, for command-line help."""


def normal_level(level: str) -> str:
    """``level`` as normal text (stripped, lower case, ``"06"`` → ``"6"``).

    Raises:
        ValueError: :func:`level_number` rejects it.
    """
    text = level.strip().lower()
    level_number(text)
    return str(int(text)) if text.isdigit() else text


def level_number(level: str) -> int:
    """The logging level for a level name or a klog verbosity (see the module docstring).

    Raises:
        ValueError: neither one of the four names nor an integer 0..10.
    """
    text = level.strip().lower()
    if text in _NAMED:
        return _NAMED[text]
    if text.isdigit() and int(text) <= KLOG_MAX:
        verbosity = int(text)
        return logging.DEBUG if verbosity >= 4 else logging.INFO - verbosity
    raise ValueError(
        f"{level!r} is neither a level name (debug, info, warning, error) "
        f"nor a klog verbosity 0..{KLOG_MAX}"
    )


def _verbosity(level: str) -> int | None:
    """The klog verbosity ``level`` names, or None for a level name."""
    text = level.strip().lower()
    return int(text) if text.isdigit() else None


class _RequestTrace(logging.Filter):
    """Rewords the HTTP library's per-request line as client-go's response trace.

    The library logs ``HTTP Request: GET <url> "HTTP/1.1 200 OK"`` at INFO; the trace is
    debug detail, so the record becomes a DEBUG line in klog's words.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if str(record.msg).startswith("HTTP Request:") and isinstance(args, tuple):
            if len(args) == 5:
                method, url, version, status, reason = args
                record.msg = 'round_trippers.go: "Response" verb="%s" url="%s" status="%s %s" (%s)'
                record.args = (method, str(url), status, reason, version)
            record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return True


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in _BOUND_KEYS:
            if hasattr(record, key):
                doc[key] = getattr(record, key)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        bound = [f"{k}={getattr(record, k)}" for k in _BOUND_KEYS if hasattr(record, k)]
        return f"{line} {' '.join(bound)}" if bound else line


def formatter(fmt: LogFormat = "text") -> logging.Formatter:
    """The formatter of one log format (what ``setup`` puts on the process's handler)."""
    if fmt == "json":
        return _JsonFormatter()
    return _TextFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")


def setup(level: str = "info", fmt: LogFormat = "text") -> None:
    """Configure the root logger for one process (stderr); ``level`` as ``level_number`` takes.

    Raises:
        ValueError: ``level`` is not a level (the CLI validates it before).
    """
    number = level_number(level)
    for detail, name in ((V1, "V1"), (V2, "V2"), (V3, "V3")):
        logging.addLevelName(detail, name)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(number)
    # Every API request is an INFO line in httpx: too chatty below the request-trace verbosity.
    verbosity = _verbosity(level)
    trace = verbosity is not None and verbosity >= REQUEST_TRACE
    for name in _HTTP_LOGGERS:
        http = logging.getLogger(name)
        http.setLevel(logging.INFO if trace else logging.WARNING)
        http.filters[:] = [_RequestTrace()] if trace else []
    logging.getLogger("httpcore2").setLevel(logging.WARNING)
