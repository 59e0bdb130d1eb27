"""Tell the node's CD that ``nvidia-imex`` cannot start because another one holds the session.

The driver allows one IMEX session owner per node. When a host ``nvidia-imex.service`` runs
(installed with the driver packages and enabled by default on many images), the containerised
``nvidia-imex`` logs ``NV_ERR_IN_USE Failed to allocate Imex session`` and exits; the supervisor
restarts it with a backoff, and without this module all an operator sees is a CD that never
turns Ready and ``ImexRestarted`` Events on a pod (upstream #524).

:class:`SessionWatch` reads each line IMEX prints (``on_line``, the supervisor's output hook)
and, when the child that printed ``NV_ERR_IN_USE`` exits (``on_exit``, from the restart hook),
posts (through ``post``) one Warning Event ``ImexSessionInUse`` on the daemon's pod and one on
its ComputeDomain, naming the node and saying what to do, and logs it. The message is the same
on every retry, so the recorder counts repeats on one Event instead of making a new one per
restart. Supervision goes on: once the host service is stopped, the next restart takes the session.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

logger = logging.getLogger(__name__)

IN_USE_MARK: Final = "NV_ERR_IN_USE"
"""What IMEX prints when the node's IMEX session has another owner."""

Post = Callable[[str], None]
"""Posts one Warning Event with the given message (on the pod and on the CD)."""


def in_use_message(node: str) -> str:
    """What the Event says: which node, why, and what to do."""
    return (
        f"node {node}: nvidia-imex cannot start: the node's IMEX session is held by another "
        f"nvidia-imex ({IN_USE_MARK}), most likely a host nvidia-imex.service; the driver allows "
        "one session owner per node. On the node run `systemctl disable --now "
        "nvidia-imex.service && systemctl mask nvidia-imex.service`; this daemon keeps retrying "
        "and starts once the session is free"
    )


class SessionWatch:
    """Spots IMEX's ``NV_ERR_IN_USE`` and reports it when that child exits."""

    def __init__(self, node: str, post: Post) -> None:
        self._node = node
        self._post = post
        self._seen = False
        self.reports = 0
        """How many exits were reported as session in use."""

    def on_line(self, line: str) -> None:
        """One line the current child printed."""
        if IN_USE_MARK in line:
            self._seen = True

    def on_exit(self) -> None:
        """The current child exited; report if it said the session is in use."""
        if not self._seen:
            return
        self._seen = False  # the next child gets a fresh look
        self.reports += 1
        message = in_use_message(self._node)
        logger.error("%s", message, extra={"node": self._node})
        self._post(message)
