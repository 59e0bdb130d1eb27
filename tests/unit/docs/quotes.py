"""Quoted messages in a Markdown document, and whether our source emits them.

The convention (stated at the top of docs/troubleshooting.md):

- In a table whose header has a column named ``Message``, every code span of that column is a
  message one of our programs emits, verbatim. A message that itself holds backticks is
  written as a double-backtick span (Markdown's rule).
- ``<word>`` (angle brackets around anything but angle brackets) stands for a part that varies
  (a node, a number, another message): it matches one interpolated part of the source's
  f-string or ``%``-format string, never literal text. A part the source fills from a constant
  (``{names.GPU_CLIQUE_LABEL}``, ``{Scope.PER_CLIQUE}``) is spelt out, as the reader sees it.
- A span with no letter outside its placeholders (``<where>``, ``<ns>/<name>``) names a part
  of another message (what a placeholder stands for) and is no message itself.
- ``…`` at the start or the end says that the message goes on there (a part is quoted);
  without it the quote must start (end) where the source's string starts (ends).

The source side: every string literal, f-string and ``+`` concatenation of them under
``src/``, docstrings and other bare string statements left out; each interpolated part is a
hole, unless it names a module or class constant (``NAME: Final = "..."``, an enum member)
whose value is known, which is spelt out. Plain strings are also read with their ``%``
conversions (``%s``, ``%d``, ``%.1f``, ...) as holes, as a logging call fills them.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

HOLE = "\ue000"
"""Stands for one varying part, on both sides."""
_START, _END = "\x02", "\x03"
ELLIPSIS = "…"

_PERCENT = re.compile(r"%(?:\([a-zA-Z_]\w*\))?[-#0 +]*\d*(?:\.\d+)?[sdirfgexXc]")
_PLACEHOLDER = re.compile(r"<[^<>\n]+>")
_TICKS = re.compile(r"`+")


@dataclasses.dataclass(frozen=True, slots=True)
class Quote:
    """One quoted message of the document."""

    text: str
    """As written (placeholders and ellipses included)."""
    line: int
    """1-based line of the document."""

    def pattern(self) -> str:
        """The quote as it must appear in a source template's canonical form."""
        body = self.text
        head = not body.startswith(ELLIPSIS)
        tail = not body.endswith(ELLIPSIS)
        body = body.strip(ELLIPSIS).strip() if not (head and tail) else body
        body = _PLACEHOLDER.sub(HOLE, body)
        return (_START if head else "") + body + (_END if tail else "")


# ---- the document --------------------------------------------------------------------------


def code_spans(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, content)`` of each Markdown code span of ``text`` (CommonMark's rule: a
    run of N backticks up to the next run of exactly N; one space each side is stripped when
    both are there)."""
    pos = 0
    while True:
        opening = _TICKS.search(text, pos)
        if opening is None:
            return
        size = len(opening.group())
        closing = opening
        while True:
            closing = _TICKS.search(text, closing.end())
            if closing is None or len(closing.group()) == size:
                break
        if closing is None:
            pos = opening.end()
            continue
        content = text[opening.end() : closing.start()].replace("\n", " ")
        if len(content) > 2 and content[0] == content[-1] == " " and content.strip():
            content = content[1:-1]
        yield opening.start(), closing.end(), content
        pos = closing.end()


def _cells(row: str) -> list[str]:
    """The cells of a table row, a ``|`` inside a code span or escaped not splitting."""
    protected = [(s, e) for s, e, _ in code_spans(row)]
    cells, current, i = [], [], 0
    while i < len(row):
        ch = row[i]
        inside = any(s <= i < e for s, e in protected)
        if ch == "\\" and i + 1 < len(row) and row[i + 1] == "|" and not inside:
            current.append("|")
            i += 2
            continue
        if ch == "|" and not inside:
            cells.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    cells.append("".join(current))
    if row.lstrip().startswith("|"):
        cells = cells[1:]
    if row.rstrip().endswith("|"):
        cells = cells[:-1]
    return [c.strip() for c in cells]


def column_quotes(markdown: str, column: str) -> list[Quote]:
    """Every code span in the ``column`` cells of the document's tables."""
    out: list[Quote] = []
    lines = markdown.splitlines()
    at = None  # index of the column in the current table, None outside one
    for number, line in enumerate(lines, start=1):
        if not line.lstrip().startswith("|"):
            at = None
            continue
        cells = _cells(line)
        following = lines[number] if number < len(lines) else ""
        if re.fullmatch(r"\s*\|?[\s:|-]+\|?\s*", following) and "-" in following:
            at = cells.index(column) if column in cells else None  # a header row
            continue
        if at is None or re.fullmatch(r"[\s:|-]+", line):
            continue
        if at < len(cells):
            out.extend(Quote(text=c, line=number) for _, _, c in code_spans(cells[at]))
    return out


def messages(markdown: str) -> list[Quote]:
    """The quoted messages (the ``Message`` columns); a span with no letter outside its
    placeholders (``<where>``, ``<ns>/<name>``) names a part and is no message."""
    found = column_quotes(markdown, "Message")
    return [q for q in found if re.search(r"[A-Za-z]", _PLACEHOLDER.sub("", q.text))]


# ---- the source --------------------------------------------------------------------------


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base is not None else None
    return None


def constants(files: Iterable[Path]) -> dict[str, set[str]]:
    """Name → the values of module-level and class-level ``str``/``int`` constants (upper-case
    names: an enum member, a ``Final``) by that name (keys ``NAME``, ``module.NAME`` and
    ``Class.NAME``)."""
    table: dict[str, set[str]] = {}

    def add(keys: Iterable[str], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, str | int):
            return
        for key in keys:
            table.setdefault(key, set()).add(str(value))

    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        module = path.stem
        scopes: list[tuple[str | None, list[ast.stmt]]] = [(None, tree.body)]
        scopes += [(n.name, n.body) for n in tree.body if isinstance(n, ast.ClassDef)]
        for owner, body in scopes:
            for stmt in body:
                target: ast.expr | None = None
                value: ast.expr | None = None
                if isinstance(stmt, ast.AnnAssign):
                    target, value = stmt.target, stmt.value
                elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                    target, value = stmt.targets[0], stmt.value
                if not isinstance(target, ast.Name) or not isinstance(value, ast.Constant):
                    continue
                if not re.fullmatch(r"_?[A-Z][A-Z0-9_]*", target.id):
                    continue  # a constant by its name: not a field's default or a variable
                keys = [target.id, f"{owner or module}.{target.id}"]
                add(keys, value.value)
    return table


class _Templates(ast.NodeVisitor):
    """Collects the canonical form of every string expression of one module."""

    def __init__(self, known: dict[str, set[str]]) -> None:
        self.found: set[str] = set()
        self._known = known
        self._skip: set[int] = set()

    def _resolve(self, node: ast.FormattedValue) -> str:
        name = _dotted(node.value)
        if name is None or node.format_spec is not None:
            return HOLE
        name = name.removesuffix(".value")
        parts = name.split(".")
        for size in (len(parts), 2, 1):
            values = self._known.get(".".join(parts[-size:]))
            if values and len(values) == 1:
                value = next(iter(values))
                return repr(value) if node.conversion == ord("r") else value
        return HOLE

    def _form(self, node: ast.expr) -> str | None:
        """The canonical text of a string expression, None when it is none."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                elif isinstance(value, ast.FormattedValue):
                    parts.append(self._resolve(value))
            return "".join(parts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self._form(node.left), self._form(node.right)
            if left is None and right is None:
                return None
            return (left if left is not None else HOLE) + (right if right is not None else HOLE)
        return None

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            self._skip.add(id(node.value))  # a docstring or a bare string: no message
        self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        # Its pieces are no strings of their own: only the whole is a template.
        self._skip.update(id(v) for v in node.values if isinstance(v, ast.Constant))
        for value in node.values:
            if isinstance(value, ast.FormattedValue) and value.format_spec is not None:
                self._skip.add(id(value.format_spec))
        self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.expr) and id(node) not in self._skip:
            form = self._form(node)
            if form is not None:
                self.found.add(_START + form + _END)
                converted = _PERCENT.sub(HOLE, form)
                if converted != form:
                    self.found.add(_START + converted + _END)
        super().generic_visit(node)


def templates(root: Path) -> list[str]:
    """The canonical form of every string expression under ``root`` (a source tree)."""
    files = sorted(root.rglob("*.py"))
    known = constants(files)
    found: set[str] = set()
    for path in files:
        collector = _Templates(known)
        collector.visit(ast.parse(path.read_text(), str(path)))
        found |= collector.found
    return sorted(found)


def emitted(quote: Quote, source: Iterable[str]) -> bool:
    """Whether some template of ``source`` holds ``quote``."""
    wanted = quote.pattern()
    return any(wanted in template for template in source)


def missing(quotes: Iterable[Quote], source: Iterable[str]) -> list[Quote]:
    """The quotes no template holds."""
    corpus = list(source)
    return [q for q in quotes if not emitted(q, corpus)]
