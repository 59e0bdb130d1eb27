"""Capped exponential backoff with jitter, as a reusable, stateless policy object.

The n-th retry (``attempt`` counts from 0) waits ``min(maximum, initial * factor**attempt)``
multiplied by a uniform random factor in ``[1 - jitter, 1 + jitter]``. The cap applies before the
jitter, so the hard ceiling is ``maximum * (1 + jitter)``; upstream's daemon work queue behaves the
same way (5 ms doubling, capped at 6 s, then multiplied by 0.75..1.25). Jitter keeps many clients
that failed together from retrying together.

The policy holds no state: callers keep their own attempt counter (and reset it when the thing
they retry has been healthy for a while). Randomness comes from an injected ``random.Random``, so
tests get deterministic delays; with ``jitter=0`` no randomness is drawn at all.
"""

from __future__ import annotations

import dataclasses
import random


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Backoff:
    """Capped exponential backoff policy."""

    initial: float = 0.5
    """Delay before the first retry, in seconds (before jitter). Must be > 0."""

    maximum: float = 30.0
    """Cap on the un-jittered delay, in seconds. Must be >= ``initial``."""

    factor: float = 2.0
    """Growth per attempt. Must be >= 1."""

    jitter: float = 0.25
    """Relative spread of the random factor around 1, in ``[0, 1)``; 0 disables jitter."""

    def __post_init__(self) -> None:
        if self.initial <= 0:
            raise ValueError(f"backoff initial delay must be > 0, got {self.initial}")
        if self.maximum < self.initial:
            raise ValueError(f"backoff maximum {self.maximum} is below initial {self.initial}")
        if self.factor < 1:
            raise ValueError(f"backoff factor must be >= 1, got {self.factor}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"backoff jitter must be in [0, 1), got {self.jitter}")

    def base_delay(self, attempt: int) -> float:
        """The un-jittered, capped delay before retry number ``attempt`` (0-based)."""
        if attempt < 0:
            raise ValueError(f"attempt must be >= 0, got {attempt}")
        try:
            raw = self.initial * self.factor**attempt
        except OverflowError:
            return self.maximum
        return min(self.maximum, raw)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The jittered delay before retry number ``attempt`` (0-based), in seconds.

        Args:
            attempt: How many retries came before this one.
            rng: Source of randomness; None uses the standard library's shared generator.
        """
        base = self.base_delay(attempt)
        if self.jitter == 0:
            return base
        draw = rng.uniform if rng is not None else random.uniform
        return base * draw(1.0 - self.jitter, 1.0 + self.jitter)

    @property
    def ceiling(self) -> float:
        """The largest delay this policy can ever return."""
        return self.maximum * (1.0 + self.jitter)
