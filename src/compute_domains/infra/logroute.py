"""One process, many components' logs: a record goes to the log of the component that wrote it.

When one process hosts many component instances (the simulator's virtual nodes: a kubelet
plugin per node, a daemon per domain node), each instance still has a log of its own, the file
``kubectl logs`` reads for its container. The instance runs in tasks that inherit a context
variable naming its :class:`Sink` (``route_to``); the router handler on the root logger writes
each record to the sink of the context it was logged in, in the sink's format and from the
sink's level, and the process's other handlers skip it. Tasks and ``asyncio.to_thread`` workers
copy the context when they are created, so what an instance starts logs to its sink too.
Records logged outside any sink's context are the process's own and are not touched.
"""

from __future__ import annotations

import contextvars
import logging
from pathlib import Path
from typing import TextIO

from compute_domains.infra import logs

_CURRENT: contextvars.ContextVar[Sink | None] = contextvars.ContextVar("log_sink", default=None)
"""The sink of the instance whose context is running (a context variable, not shared state:
every task sees its own)."""


class Sink:
    """The log of one hosted instance: a file, a level, a format."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._stream: TextIO | None = path.open("a", encoding="utf-8", buffering=1)
        self.level = logging.INFO
        self._formatter = logs.formatter("text")

    def configure(self, level: str, fmt: logs.LogFormat) -> None:
        """Level (``logs.level_number`` takes it) and format, as the component's flags say."""
        self.level = logs.level_number(level)
        self._formatter = logs.formatter(fmt)

    def write(self, text: str) -> None:
        """Append raw text (a program's own output)."""
        if self._stream is not None:
            self._stream.write(text)

    def emit(self, record: logging.LogRecord) -> None:
        """Write one record if it is at or above this sink's level."""
        if self._stream is not None and record.levelno >= self.level:
            self._stream.write(self._formatter.format(record) + "\n")

    def close(self) -> None:
        """Stop writing (the instance ended)."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None


class _Router(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        sink = _CURRENT.get()
        if sink is not None:
            try:
                sink.emit(record)
            except Exception:
                self.handleError(record)


def _unrouted(record: logging.LogRecord) -> bool:
    return _CURRENT.get() is None


def install() -> None:
    """Put the router on the root logger (once) and keep routed records off its other
    handlers; call after the process's own logging set-up."""
    root = logging.getLogger()
    if not any(isinstance(h, _Router) for h in root.handlers):
        root.addHandler(_Router())
    for handler in root.handlers:
        if not isinstance(handler, _Router) and _unrouted not in handler.filters:
            handler.addFilter(_unrouted)


def route_to(sink: Sink | None) -> contextvars.Token[Sink | None]:
    """Make records of the current context (and of tasks it creates from now) go to ``sink``."""
    return _CURRENT.set(sink)


def current() -> Sink | None:
    """The sink of the current context."""
    return _CURRENT.get()
