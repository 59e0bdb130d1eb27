"""The simulated nvidia-imex's own log output, in IMEX's line format.

Lines look like ``[Mar 27 2025 15:47:10] [INFO] [tid 39] <message>``. This is program output of a
stand-in binary (what the supervising daemon captures and what tests read), not our Python
logging, so it is written straight to a stream.

``LOG_LEVEL`` filters as IMEX does: 0 off, 1 CRITICAL, 2 ERROR and above, 3 WARNING and above,
4 INFO and above. An empty or unopenable ``LOG_FILE_NAME`` sends the log to stderr, preceded by
the warnings the real daemon prints in that case.
"""

from __future__ import annotations

import datetime
import sys
import threading
from collections.abc import Callable
from typing import TextIO

from compute_domains.sim.imex_config import ImexConfig

_SEVERITY = {"CRITICAL": 1, "ERROR": 2, "WARNING": 3, "INFO": 4, "DEBUG": 5}


def _default_now() -> datetime.datetime:
    return datetime.datetime.now()


def log_stamp(now: datetime.datetime) -> str:
    """The bracketed time of a log line: ``Mar 27 2025 15:47:10``."""
    return now.strftime("%b %d %Y %H:%M:%S")


def short_stamp(now: datetime.datetime) -> str:
    """IMEX's short timestamp: ``3/27/2025 15:47:10.092`` (month/day/year, milliseconds)."""
    ms = now.microsecond // 1000
    return f"{now.month}/{now.day}/{now.year} {now:%H:%M:%S}.{ms:03d}"


class ImexLog:
    """Writes IMEX-format log lines to one stream, flushing each line."""

    def __init__(
        self,
        stream: TextIO,
        *,
        level: int = 4,
        now: Callable[[], datetime.datetime] = _default_now,
    ) -> None:
        self._stream = stream
        self._level = level
        self._now = now

    def raw(self, text: str) -> None:
        """Write one unformatted line (the real daemon's early stderr notices)."""
        self._stream.write(text + "\n")
        self._stream.flush()

    def log(self, severity: str, message: str) -> None:
        """Write ``message`` at ``severity`` (CRITICAL, ERROR, WARNING, INFO, DEBUG)."""
        if _SEVERITY[severity] > self._level:
            return
        tid = threading.get_native_id()
        self.raw(f"[{log_stamp(self._now())}] [{severity}] [tid {tid}] {message}")

    def info(self, message: str) -> None:
        """Log at INFO."""
        self.log("INFO", message)

    def warning(self, message: str) -> None:
        """Log at WARNING."""
        self.log("WARNING", message)

    def error(self, message: str) -> None:
        """Log at ERROR."""
        self.log("ERROR", message)

    def close(self) -> None:
        """Close the stream unless it is stderr."""
        if self._stream is not sys.stderr:
            self._stream.close()


def open_log(file_name: str, *, append: bool, level: int, stream: TextIO | None = None) -> ImexLog:
    """The daemon's log as configured by ``LOG_FILE_NAME`` / ``LOG_APPEND_TO_LOG``; without a
    file, ``stream`` (the process's stderr)."""
    if file_name:
        try:
            stream = open(file_name, "a" if append else "w", encoding="utf-8")
        except OSError as err:
            reason = err.strerror or str(err)
        else:
            log = ImexLog(stream, level=level)
            log.raw(f"IMEX Log initializing at: {short_stamp(_default_now())}")
            return log
    else:
        reason = "No such file or directory"
    log = ImexLog(stream if stream is not None else sys.stderr, level=level)
    log.raw(f"WARNING: failed to open IMEX log file {file_name} errno = {reason}")
    log.raw("INFO: using stderr for IMEX logging")
    log.raw(f"WARNING: failed to chmod IMEX log file {file_name} errno = {reason}")
    log.raw(f"IMEX Log initializing at: {short_stamp(_default_now())}")
    return log


def config_summary(log: ImexLog, config: ImexConfig, *, version: str, nogpu: bool) -> None:
    """The daemon's first log lines: version and the effective configuration."""
    if nogpu:
        log.info(f"IMEX version {version} is running in NO GPU MODE")
    else:
        log.info(f"IMEX version {version} is running with the following configuration options:")
    log.info(f"Logging level = {config.log_level}")
    log.info(f"Logging file name/path = {config.log_file_name}")
    log.info(f"Append to log file = {int(config.log_append)}")
    log.info("Max Log file size = 1024 (MBs)")
    log.info("Use Syslog file = 0")
    log.info("Authentication and Encryption enabled = 0")
    log.info(f"IMEX Library communication bind interface = {config.bind_interface_ip}")
    log.info(f"IMEX library communication bind port = {config.server_port}")
    if config.daemonize:
        log.warning("DAEMONIZE=1 is not simulated; running in the foreground")
