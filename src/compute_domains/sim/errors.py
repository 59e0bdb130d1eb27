"""The simulator's own errors: what failed in a simulated cluster or a tool build, and what to do.

They derive from ``infra.errors.ComputeDomainsError``, so the CLI prints them as one clear line
like every other error of the project; they live here, not in ``infra``, because only the
simulator (and the CLI commands that drive it) raise or catch them.
"""

from __future__ import annotations

from compute_domains.infra import errors


class ToolBuildError(errors.ComputeDomainsError):
    """Building one upstream tool failed; names the tool, the step and the tail of its output."""

    def __init__(self, *, tool: str, step: str, detail: str) -> None:
        super().__init__(f"building tool '{tool}' failed at step '{step}':\n{detail}")
        self.tool = tool
        self.step = step
        self.detail = detail


class SimError(errors.ComputeDomainsError):
    """The simulated cluster could not do what was asked; the message says what to do."""
