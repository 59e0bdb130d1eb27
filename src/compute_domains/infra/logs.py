"""Logging set-up (text or JSON lines), called once by the CLI and never by components."""

from __future__ import annotations

import json
import logging
import sys
from typing import Literal

LogFormat = Literal["text", "json"]

_BOUND_KEYS = ("cd", "claim", "claim_uid", "node", "pod", "child")


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
    """Configure the root logger for one process (stderr)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(_TextFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Every API request is an INFO line in httpx; far too chatty for a component log.
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore2").setLevel(logging.WARNING)
