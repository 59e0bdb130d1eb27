"""Logging set-up (text or JSON lines), called once by the CLI and never by components.

Levels: the four names (debug, info, warning, error), or a klog verbosity as NVIDIA's driver
takes it (``-v N``, chart value ``logVerbosity``), 0 to 10. Verbosity 0 is INFO; 1 to 3 add the
few detail lines NVIDIA's tooling expects at those verbosities (``V1``..``V3``, logging levels
19..17, between INFO and DEBUG); 4 and above is DEBUG (klog's "debug detail" range). A name
stays a name: ``info`` shows no V1..V3 line, ``debug`` shows them all.
"""

from __future__ import annotations

import json
import logging
import sys
from types import MappingProxyType
from typing import Final, Literal

LogFormat = Literal["text", "json"]

_BOUND_KEYS = ("cd", "claim", "claim_uid", "node", "pod", "child")

V1: Final = logging.INFO - 1
"""Detail NVIDIA logs at klog verbosity 1 (shown from ``logVerbosity`` 1 and at debug)."""
V2: Final = logging.INFO - 2
"""Detail NVIDIA logs at klog verbosity 2 (informer and per-object event lines)."""
V3: Final = logging.INFO - 3
"""Detail NVIDIA logs at klog verbosity 3 (list-and-watch lines)."""
KLOG_MAX: Final = 10
"""Highest klog verbosity accepted (klog's own scale stops meaning more there)."""

_NAMED: Final = MappingProxyType(
    {
        "debug": logging.DEBUG,
        "info": logging.INFO,
        "warning": logging.WARNING,
        "error": logging.ERROR,
    }
)


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


def setup(level: str = "info", fmt: LogFormat = "text") -> None:
    """Configure the root logger for one process (stderr); ``level`` as ``level_number`` takes.

    Raises:
        ValueError: ``level`` is not a level (the CLI validates it before).
    """
    number = level_number(level)
    for detail, name in ((V1, "V1"), (V2, "V2"), (V3, "V3")):
        logging.addLevelName(detail, name)
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(_TextFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(number)
    # Every API request is an INFO line in httpx; far too chatty for a component log.
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore2").setLevel(logging.WARNING)
