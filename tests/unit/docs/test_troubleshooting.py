"""docs/troubleshooting.md quotes only messages our code emits, and names every Ready reason.

The quoting convention and the matching rules are ``quotes``' (and the document's own first
section): a code span in a ``Message`` column is a message, ``<word>`` one varying part, ``…``
a message that goes on.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from tests.unit.docs import quotes

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "troubleshooting.md"
SRC = ROOT / "src" / "compute_domains"

pytestmark = pytest.mark.slow_unit(8, "reads every module under src/ (AST) once")


@functools.cache
def _source() -> tuple[str, ...]:
    return tuple(quotes.templates(SRC))


def _quote(text: str) -> quotes.Quote:
    return quotes.Quote(text=text, line=0)


def _final_strings(path: Path, skip: frozenset[str] = frozenset()) -> dict[str, str]:
    """``NAME: Final = "value"`` of one module (upper-case names), less ``skip``."""
    out = {}
    for stmt in ast.parse(path.read_text()).body:
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)
            and stmt.target.id.isupper()
            and stmt.target.id not in skip
        ):
            out[stmt.target.id] = stmt.value.value
    return out


def test_every_quoted_message_is_one_our_code_emits() -> None:
    found = quotes.messages(DOC.read_text())
    assert len(found) >= 60, "the Message columns were not read (or lost most of their quotes)"
    missing = quotes.missing(found, _source())
    assert not missing, "not emitted by src/ as quoted:\n" + "\n".join(
        f"  docs/troubleshooting.md:{q.line}: {q.text}" for q in missing
    )


_COMMANDS = ("kubectl", "cdctl", "helm", "systemctl", "nvidia-smi")
_FIELD = re.compile(r"[\w.]+: \w+")


def test_every_other_span_with_words_is_a_command_a_field_or_a_message() -> None:
    """Outside the Message columns a message may be quoted again (a cross-reference); it is
    checked as well, so no quote escapes the test by standing elsewhere."""
    text = DOC.read_text()
    source = _source()
    columns = {(q.line, q.text) for q in quotes.column_quotes(text, "Message")}
    unchecked = []
    for number, line in enumerate(text.splitlines(), start=1):
        for _, _, span in quotes.code_spans(line):
            if (number, span) in columns or " " not in span or span.split()[0] in _COMMANDS:
                continue
            if _FIELD.fullmatch(span) or quotes.messages(f"| Message |\n|---|\n| `{span}` |") == []:
                continue  # a field, or placeholders only
            if not quotes.emitted(quotes.Quote(text=span, line=number), source):
                unchecked.append(f"docs/troubleshooting.md:{number}: {span}")
    assert unchecked == []


def _altered(text: str) -> str:
    """``text`` with its longest word (outside placeholders) misspelt: a letter doubled."""
    parts = re.split(r"(<[^<>\n]+>)", text)  # odd items are placeholders
    at, word = max(
        ((i, w) for i, part in enumerate(parts) if i % 2 == 0 for w in part.split()),
        key=lambda found: len(found[1]),
    )
    middle = len(word) // 2
    parts[at] = parts[at].replace(word, word[:middle] + word[middle] + word[middle:], 1)
    return "".join(parts)


def test_each_quoted_message_altered_by_one_letter_is_caught() -> None:
    """No quote passes whatever it says: each one, misspelt, is reported."""
    found = quotes.messages(DOC.read_text())
    source = _source()
    passed = [
        q.text
        for q in found
        if quotes.emitted(quotes.Quote(text=_altered(q.text), line=q.line), source)
    ]
    assert passed == []


def test_an_altered_message_in_the_document_is_reported_with_its_line() -> None:
    text = DOC.read_text()
    original = "`its IMEX daemon has not registered yet`"
    assert original in text
    broken = text.replace(original, "`its IMEX daemon has not registred yet`")
    missing = quotes.missing(quotes.messages(broken), _source())
    assert [(q.text, q.line) for q in missing] == [
        (
            "its IMEX daemon has not registred yet",
            text[: text.index(original)].count("\n") + 1,
        )
    ]


_FULL = "it is full (<n> of <n> slots, maxNodesPerIMEXDomain)"


@pytest.mark.parametrize(
    ("quote", "emitted"),
    [
        # An f-string: each interpolated part is a placeholder.
        ("node <n> cannot join clique <c>: " + _FULL, True),
        # A concrete value where the code interpolates: not the message as written.
        ("node gb200-r0-n18 cannot join clique <c>: " + _FULL, False),
        # The message goes on after "full": only with the ellipsis.
        ("node <n> cannot join clique <c>: it is full", False),
        ("node <n> cannot join clique <c>: it is full …", True),
        # It starts with "node ": a quote from its middle needs the leading ellipsis.
        ("<n> cannot join clique <c>: …", False),
        ("… <n> cannot join clique <c>: …", True),
        # A placeholder never stands for literal text.
        ("node <n> cannot join <where>: …", False),
        # A part filled from a constant is spelt out.
        ("the node has no nvidia.com/gpu.clique label, so no shared IMEX serves it", True),
        ("the node has no <label> label, so no shared IMEX serves it", False),
        # An enum member (Scope.PER_CLIQUE) is spelt as its value.
        ("node <n> is held by the perClique scope (it runs its clique's shared IMEX: <w>)…", True),
        # A logging call's %-format: %s, %d are placeholders.
        ("driver root <root> has no <programs>: IMEX daemons on this node cannot start; …", True),
        # A docstring is not a message.
        ("Tell the node's CD that …", False),
        ("the node is NotReady", True),
        ("the node is not Ready", False),
    ],
)
def test_placeholders_and_ellipses(quote: str, emitted: bool) -> None:
    assert quotes.emitted(_quote(quote), _source()) is emitted


def test_code_spans_follow_markdown() -> None:
    row = "| `a` | ``with `ticks` inside`` | `x|y` | plain |"
    assert [c for _, _, c in quotes.code_spans(row)] == ["a", "with `ticks` inside", "x|y"]
    table = (
        "| Reason | Message |\n|---|---|\n| `R` | `m <x>`, `…; n`, `<x>` is `<a>/<b>` |\n"
        "\ntext `not a message`\n"
    )
    assert [q.text for q in quotes.messages(table)] == ["m <x>", "…; n"]
    assert [q.line for q in quotes.messages(table)] == [3, 3]
    assert [q.text for q in quotes.column_quotes(table, "Reason")] == ["R"]


def test_every_condition_type_and_reason_is_named() -> None:
    """Every condition type and reason api/conditions.py defines (the Ready reasons the
    controller emits among them) has its place in the document."""
    spans = {c for _, _, c in quotes.code_spans(DOC.read_text())}
    defined = _final_strings(SRC / "api" / "conditions.py", frozenset({"TRUE", "FALSE"}))
    assert len(defined) >= 15
    assert sorted(set(defined.values()) - spans) == []


def test_every_event_reason_is_named() -> None:
    """Every Event reason of the controller, the daemon and the warm spares is in the
    document's Events table."""
    table = {q.text for q in quotes.column_quotes(DOC.read_text(), "Event")}
    skip = frozenset({"COMPONENT", "NORMAL", "WARNING"})
    reasons = {
        **_final_strings(SRC / "controller" / "events.py", skip),
        **_final_strings(SRC / "daemon" / "events.py", skip),
    }
    warm = _final_strings(SRC / "controller" / "warm.py")
    reasons |= {k: v for k, v in warm.items() if k.endswith("_EVENT")}
    assert len(reasons) >= 15
    assert sorted(set(reasons.values()) - table) == []


def test_every_named_reason_exists() -> None:
    """A Reason or Event column names only reasons that src/ defines."""
    text = DOC.read_text()
    named = quotes.column_quotes(text, "Reason") + quotes.column_quotes(text, "Event")
    named += quotes.column_quotes(text, "Condition / reason")
    source = _source()
    words = {w for q in named for w in q.text.split() if w != "(True)"}
    assert len(words) >= 30
    unknown = sorted(w for w in words if not quotes.emitted(_quote(w), source))
    assert unknown == []


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {
        _slug(line.lstrip("#"))
        for line in path.read_text().splitlines()
        if re.match(r"#{1,6} ", line)
    }


def test_links_to_sections_resolve() -> None:
    text = DOC.read_text()
    links = re.findall(r"\]\(([\w.-]*\.md)?#([^)]+)\)", text)
    assert len(links) >= 10
    broken = [
        f"{target or 'troubleshooting.md'}#{anchor}"
        for target, anchor in links
        if anchor not in _anchors(DOC.parent / target if target else DOC)
    ]
    assert broken == []


def test_placeholders_in_running_text_are_escaped() -> None:
    """Outside code, ``<claim>`` would be read as an HTML tag and vanish: write ``\\<claim>``."""
    bare = []
    inside = False
    for number, line in enumerate(DOC.read_text().splitlines(), start=1):
        if line.startswith("```"):
            inside = not inside
            continue
        spans = [(start, end) for start, end, _ in quotes.code_spans(line)]
        for found in re.finditer(r"(?<!\\)<[^<>\n]+>", line):
            if not inside and not any(s <= found.start() < e for s, e in spans):
                bare.append(f"docs/troubleshooting.md:{number}: {found.group()}")
    assert bare == []
