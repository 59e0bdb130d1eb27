"""Typed access to decoded JSON: each helper returns its value with its JSON type checked.

Readers of files this project does not fully trust (its own checkpoint, NVIDIA's) walk decoded
JSON with these, so a wrong shape becomes one ``TypeError`` naming what was expected, which
the caller turns into its "corrupt file" message.
"""

from __future__ import annotations

from typing import Any


def obj(raw: object) -> dict[str, Any]:
    """``raw`` as a JSON object; TypeError otherwise."""
    if not isinstance(raw, dict):
        raise TypeError(f"expected a JSON object, got {type(raw).__name__}")
    return raw


def array(raw: object) -> list[Any]:
    """``raw`` as a JSON array; TypeError otherwise."""
    if not isinstance(raw, list):
        raise TypeError(f"expected a JSON array, got {type(raw).__name__}")
    return raw


def string(raw: object) -> str:
    """``raw`` as a JSON string; TypeError otherwise."""
    if not isinstance(raw, str):
        raise TypeError(f"expected a string, got {type(raw).__name__}")
    return raw
