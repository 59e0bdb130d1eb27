"""The project's exception hierarchy: every error says whether retrying can help.

``PermanentError`` never heals by retrying (bad input); ``TemporaryError`` may (a peer not ready,
an API conflict); ``ConfigError`` is a bad setting found at start-up. Tool and simulator errors
carry what failed and what to do, so the CLI can print them as one clear line.
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


class ToolBuildError(ComputeDomainsError):
    """Building one upstream tool failed; names the tool, the step and the tail of its output."""

    def __init__(self, *, tool: str, step: str, detail: str) -> None:
        super().__init__(f"building tool '{tool}' failed at step '{step}':\n{detail}")
        self.tool = tool
        self.step = step
        self.detail = detail


class SimError(ComputeDomainsError):
    """The simulated cluster could not do what was asked; the message says what to do."""
