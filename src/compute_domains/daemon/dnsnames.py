"""Stable daemon index → DNS name mapping, and our managed block in a hosts file.

In DNS-names mode every IMEX node is listed by a fixed name of the daemon's stable clique index,
``compute-domain-daemon-<infix>-%04d``, so ``nodes.cfg`` never changes; which pod answers to a
name is decided only by hosts-file lines (name → pod IP). This module owns those lines.

The infix is the IMEX domain's (``names.imex_dns_infix``: a CD's UID, or ``shared-imex.<clique>``
for a clique's shared IMEX), so two domains never list the same names: IMEX takes equal node
maps for one domain, and with NVIDIA's names (``compute-domain-daemon-%04d`` in every domain, what
every function here gives without a ``domain``) a pod IP reused by another domain's IMEX received
the old domain's shutdown message (upstream #1447; docs/decisions/0016).

Invariants of :func:`render_hosts` / :func:`update_hosts_file`:

* Only our marked block (between :data:`BEGIN_MARKER` and :data:`END_MARKER`) is ever changed;
  every other line of the file is preserved byte for byte, in order. (Upstream instead drops every
  line containing the name prefix and re-appends a header, and its header and a blank line pile up
  on each rewrite; we do neither.)
* Rewriting is idempotent and does not grow the file: the result depends only on the lines outside
  our block(s) and on the mapping. Duplicate or unterminated blocks left by a crash are folded into
  one, at the position of the first.
* Mapping lines are ``IP<TAB>name``, sorted by index, so identical mappings give identical files;
  a block written for another domain (a resident agent's previous CD) is replaced whole.
* An empty mapping removes the block altogether.
* The write is atomic (temp file + rename) wherever the file can be renamed over; a container's
  ``/etc/hosts`` is usually a bind mount, which cannot be replaced by rename (EBUSY), and then the
  file is rewritten in place (truncate + write + fsync), as upstream does.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

from compute_domains.api import names
from compute_domains.infra import atomicfile

logger = logging.getLogger(__name__)

NAME_PREFIX = "compute-domain-daemon-"
"""Prefix of every daemon DNS name; then the domain's infix and ``-`` (none in NVIDIA's names),
then the 4-digit zero-padded index."""

_NAME = re.compile(
    rf"{re.escape(NAME_PREFIX)}(?:([0-9a-f]{{{names.IMEX_DNS_INFIX_LENGTH}}})-)?([0-9]{{4,}})"
)

BEGIN_MARKER = "# BEGIN compute-domains daemon mappings (managed block, do not edit)"
"""First line of our managed block."""

END_MARKER = "# END compute-domains daemon mappings"
"""Last line of our managed block."""


def dns_name(index: int, domain: str = "") -> str:
    """The DNS name of the daemon with clique index ``index`` in IMEX domain ``domain``
    (``compute-domain-daemon-<infix>-0007``; ``compute-domain-daemon-0007`` without one).

    Raises:
        ValueError: ``index`` is negative.
    """
    return names.imex_dns_name(index, domain)  # the one definition of the name format


def index_of(name: str) -> int | None:
    """The index encoded in a daemon DNS name of any domain, or None if ``name`` is not one."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    infix, digits = match.groups()
    value = int(digits)
    canonical = f"{NAME_PREFIX}{infix}-{value:04d}" if infix else f"{NAME_PREFIX}{value:04d}"
    return value if canonical == name else None


def static_node_names(max_nodes: int, domain: str = "") -> list[str]:
    """All names of IMEX domain ``domain`` for indices ``0..max_nodes-1``."""
    if max_nodes < 0:
        raise ValueError(f"max_nodes must be >= 0, got {max_nodes}")
    return [dns_name(i, domain) for i in range(max_nodes)]


def with_sentinels(mapping: Mapping[int, str], max_nodes: int, sentinel: str) -> dict[int, str]:
    """``mapping`` plus ``sentinel`` for every unfilled index below ``max_nodes``.

    Upstream maps unfilled slots to a dead address so that resolving them never falls through to
    DNS (search-domain floods). Do not use a sentinel that a simulated pod may own.
    """
    filled = dict(mapping)
    for index in range(max_nodes):
        filled.setdefault(index, sentinel)
    return filled


def _block_lines(mapping: Mapping[int, str], domain: str) -> list[str]:
    if not mapping:
        return []
    body = [f"{mapping[i]}\t{dns_name(i, domain)}" for i in sorted(mapping)]
    return [BEGIN_MARKER, *body, END_MARKER]


def _is_mapping_line(line: str) -> bool:
    fields = line.split()
    return len(fields) == 2 and index_of(fields[1]) is not None


def _strip_blocks(lines: list[str]) -> tuple[list[str], int | None]:
    """Lines outside our block(s), and the position where the first block started."""
    kept: list[str] = []
    first: int | None = None
    i = 0
    while i < len(lines):
        if lines[i].strip() != BEGIN_MARKER:
            kept.append(lines[i])
            i += 1
            continue
        if first is None:
            first = len(kept)
        j = i + 1
        while j < len(lines) and lines[j].strip() not in (END_MARKER, BEGIN_MARKER):
            j += 1
        if j < len(lines) and lines[j].strip() == END_MARKER:
            i = j + 1
            continue
        # Unterminated block (a crash mid-edit, or a hand edit): it ends after the last
        # consecutive mapping line, so foreign lines after it survive.
        j = i + 1
        while j < len(lines) and _is_mapping_line(lines[j]):
            j += 1
        i = j
    return kept, first


def render_hosts(existing: str, mapping: Mapping[int, str], domain: str = "") -> str:
    """The hosts-file text with our block set to ``mapping`` (index → IP) under the names of
    IMEX domain ``domain``; pure.

    Lines outside our block are kept exactly; the block replaces the first old one in place, or is
    appended at the end when there was none.
    """
    lines = existing.split("\n")
    trailing_newline = existing.endswith("\n")
    if trailing_newline:
        lines.pop()
    kept, first = _strip_blocks(lines) if existing else ([], None)
    block = _block_lines(mapping, domain)
    position = len(kept) if first is None else first
    result = kept[:position] + block + kept[position:]
    if not result:
        return ""
    text = "\n".join(result)
    # Keep the original ending when only foreign lines remain; anything we add ends in "\n".
    return text + "\n" if trailing_newline or block else text


def update_hosts_file(
    path: Path, mapping: Mapping[int, str], *, mode: int = 0o644, domain: str = ""
) -> bool:
    """Set our block in the hosts file at ``path`` (names of IMEX domain ``domain``); True if
    the file content changed.

    A missing file counts as empty. Nothing is written when the content would not change, so the
    caller can use the result to decide whether IMEX needs a SIGUSR1.
    """
    old = atomicfile.read_text_or_none(path)
    new = render_hosts(old or "", mapping, domain)
    if old is not None and new == old:
        return False
    try:
        atomicfile.write_atomic(path, new, mode=mode)
    except OSError as err:
        if err.errno not in (errno.EBUSY, errno.EXDEV, errno.EPERM, errno.EACCES, errno.EROFS):
            raise
        # A bind-mounted file (kubelet-managed /etc/hosts) cannot be renamed over, and its
        # folder may be read-only (EROFS, EACCES): rewrite in place instead.
        logger.debug("hosts file %s cannot be replaced (%s); rewriting in place", path, err)
        _write_in_place(path, new)
    return True


def _write_in_place(path: Path, text: str) -> None:
    with path.open("r+b") as fh:
        fh.truncate(0)
        fh.write(text.encode())
        fh.flush()
        os.fsync(fh.fileno())
