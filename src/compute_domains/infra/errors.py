"""The project's exception hierarchy: every error says whether retrying can help.

``PermanentError`` never heals by retrying (bad input); ``TemporaryError`` may (a peer not ready,
an API conflict); ``ConfigError`` is a bad setting found at start-up. The simulator's own errors
live in ``sim.errors`` (they derive from ``ComputeDomainsError``).
"""

from __future__ import annotations


class ComputeDomainsError(Exception):
    """Base of every error this project raises on purpose."""


class PermanentError(ComputeDomainsError):
    """Retrying will not help: the input is wrong."""


class TemporaryError(ComputeDomainsError):
    """Retrying may help; ``delay`` suggests when (seconds), None for the caller's backoff."""

    def __init__(self, message: str, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class ConfigError(ComputeDomainsError):
    """An invalid setting or a missing prerequisite, found before any work starts."""
