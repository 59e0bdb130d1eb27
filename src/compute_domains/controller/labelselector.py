"""Kubernetes label selectors in their string form (``kubectl -l``), parsed and matched (pure).

The grammar is Kubernetes' (``k8s.io/apimachinery/pkg/labels``), comma-separated requirements:
``key``, ``!key``, ``key=value``, ``key==value``, ``key!=value``, ``key in (v1,v2)``,
``key notin (v1,v2)``, ``key>N``, ``key<N``. As there, ``!=`` and ``notin`` also match a node
without the label. Keys are ``[prefix/]name`` (prefix a DNS subdomain, name at most 63
characters); values are empty or label values. Unlike ``labels.Parse``, an empty selector is an
error: for warm spares it would select every node of the cluster.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping
from typing import Final

from compute_domains.api import names

_NAME: Final = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_PREFIX: Final = re.compile(f"^{names.DNS_SUBDOMAIN_REGEX}$")
_SPECIAL: Final = frozenset(" \t\n,()!=<>")


class SelectorError(ValueError):
    """The selector does not parse; the message says where and why."""


class Op(enum.StrEnum):
    """A requirement's operator."""

    EXISTS = "exists"
    ABSENT = "!"
    EQ = "="
    NE = "!="
    IN = "in"
    NOTIN = "notin"
    GT = ">"
    LT = "<"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Requirement:
    """One requirement on one label key."""

    key: str
    op: Op
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set satisfies this requirement."""
        present = self.key in labels
        value = labels.get(self.key, "")
        match self.op:
            case Op.EXISTS:
                return present
            case Op.ABSENT:
                return not present
            case Op.EQ | Op.IN:
                return present and value in self.values
            case Op.NE | Op.NOTIN:
                return not present or value not in self.values
            case Op.GT | Op.LT:
                if not present or not re.fullmatch(r"-?[0-9]+", value):
                    return False
                bound = int(self.values[0])
                return int(value) > bound if self.op is Op.GT else int(value) < bound


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Selector:
    """All requirements, ANDed."""

    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set satisfies every requirement."""
        return all(r.matches(labels) for r in self.requirements)


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith(("==", "!="), i):
            out.append(text[i : i + 2])
            i += 2
        elif ch in _SPECIAL:
            out.append(ch)
            i += 1
        else:
            j = i
            while j < len(text) and text[j] not in _SPECIAL:
                j += 1
            out.append(text[i:j])
            i = j
    return out


def _check_key(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _PREFIX.match(prefix)):
        raise SelectorError(f"invalid label key {key!r}: bad prefix {prefix!r}")
    if not name or len(name) > 63 or not _NAME.match(name):
        raise SelectorError(f"invalid label key {key!r}")
    return key


def _check_value(value: str) -> str:
    if len(value) > 63 or not _NAME.match(value):
        raise SelectorError(f"invalid label value {value!r}")
    return value


class _Parser:
    def __init__(self, text: str) -> None:
        self._toks = _tokens(text)
        self._at = 0

    def _peek(self) -> str | None:
        return self._toks[self._at] if self._at < len(self._toks) else None

    def _next(self, what: str) -> str:
        tok = self._peek()
        if tok is None:
            raise SelectorError(f"expected {what}, found the end")
        self._at += 1
        return tok

    def _word(self, what: str) -> str:
        tok = self._next(what)
        if tok in _SPECIAL or tok in ("==", "!="):
            raise SelectorError(f"expected {what}, found {tok!r}")
        return tok

    def _value(self) -> str:
        tok = self._peek()
        if tok is None or tok in (",", ")"):
            return ""  # an empty value: "key=" matches the empty string
        return _check_value(self._word("a value"))

    def _set(self) -> tuple[str, ...]:
        if self._next("'('") != "(":
            raise SelectorError("expected '(' after in/notin")
        values = [self._value()]
        while (tok := self._next("')'")) == ",":
            values.append(self._value())
        if tok != ")":
            raise SelectorError(f"expected ',' or ')', found {tok!r}")
        return tuple(values)

    def requirement(self) -> Requirement:
        if self._peek() == "!":
            self._at += 1
            return Requirement(key=_check_key(self._word("a label key")), op=Op.ABSENT)
        key = _check_key(self._word("a label key"))
        tok = self._peek()
        if tok is None or tok == ",":
            return Requirement(key=key, op=Op.EXISTS)
        self._at += 1
        if tok in ("=", "=="):
            return Requirement(key=key, op=Op.EQ, values=(self._value(),))
        if tok == "!=":
            return Requirement(key=key, op=Op.NE, values=(self._value(),))
        if tok in ("in", "notin"):
            return Requirement(key=key, op=Op(tok), values=self._set())
        if tok in ("<", ">"):
            bound = self._word("an integer")
            if not re.fullmatch(r"-?[0-9]+", bound):
                raise SelectorError(f"expected an integer after {tok!r}, found {bound!r}")
            return Requirement(key=key, op=Op(tok), values=(bound,))
        raise SelectorError(f"expected an operator after {key!r}, found {tok!r}")

    def selector(self) -> Selector:
        if self._peek() is None:
            raise SelectorError("empty selector (it would select every node)")
        reqs = [self.requirement()]
        while (tok := self._peek()) is not None:
            if tok != ",":
                raise SelectorError(f"expected ',' between requirements, found {tok!r}")
            self._at += 1
            reqs.append(self.requirement())
        return Selector(requirements=tuple(reqs))


def parse(text: str) -> Selector:
    """Parse a selector string.

    Raises:
        SelectorError: it does not parse (the message names the offending part).
    """
    return _Parser(text).selector()
