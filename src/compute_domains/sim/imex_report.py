"""``nvidia-imex-ctl -N`` output: the domain state and the text and JSON layouts; pure functions.

Layouts follow the real tool's published samples: the legend (including upstream's "triggreed"
spelling), a ``M/D/YYYY HH:MM:SS.mmm`` timestamp, one ``Node #k`` line per configured node (the
answering node marked with ``*``), the from→to connectivity matrix, and ``Domain State:``. The JSON
has top-level keys ``nodes``, ``timestamp`` and ``status``; each node carries ``status``, ``host``,
``hostName``, ``connections`` (including itself), ``changed`` and ``version``.

Domain state: ``UP`` when every configured node is ``READY`` and every link is ``C``; ``DOWN``
when no node is available (the local daemon did not answer); ``DEGRADED`` otherwise.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from compute_domains.sim import imex_query
from compute_domains.sim.imex_wire import Link

LEGEND = """\
Connectivity Table Legend:
I - Invalid - Node wasn't reachable, no connection status available
N - Never Connected
R - Recovering - Connection was lost, but clean up has not yet been triggered.
D - Disconnected - Connection was lost, and clean up has been triggreed.
A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.
!V! - Version mismatch, communication disabled.
!M! - Node map mismatch, communication disabled.
C - Connected - Ready for operation
"""

UNAVAILABLE = imex_query.UNAVAILABLE


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NodeRow:
    """One configured node as seen by the domain query."""

    node_id: int
    host: str
    status: str
    version: str = ""
    host_name: str = ""
    connections: Mapping[int, Link] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> NodeRow:
        """Build from a daemon's ``status`` message (unknown link values count as INVALID)."""
        links: dict[int, Link] = {}
        for key, value in dict(message.get("connections") or {}).items():
            try:
                links[int(key)] = Link(value)
            except ValueError:
                links[int(key)] = Link.INVALID
        return cls(
            node_id=int(message["node"]),
            host=str(message.get("host", "")),
            status=str(message.get("state", UNAVAILABLE)),
            version=str(message.get("version", "")),
            host_name=str(message.get("hostName", "")),
            connections=links,
        )

    @classmethod
    def unavailable(cls, node_id: int, host: str) -> NodeRow:
        """A node nobody could ask."""
        return cls(node_id=node_id, host=host, status=UNAVAILABLE)

    def link(self, target: int) -> Link:
        """This node's link state to ``target`` (INVALID when the node was not reachable)."""
        if self.status == UNAVAILABLE:
            return Link.INVALID
        return self.connections.get(target, Link.NEVER_CONNECTED)


def domain_status(rows: Sequence[NodeRow]) -> str:
    """``UP``, ``DEGRADED`` or ``DOWN`` for the configured nodes."""
    if not rows or all(row.status == UNAVAILABLE for row in rows):
        return "DOWN"
    ids = [row.node_id for row in rows]
    healthy = all(
        row.status == "READY" and all(row.link(t) is Link.CONNECTED for t in ids) for row in rows
    )
    return "UP" if healthy else "DEGRADED"


def _host_text(row: NodeRow, show_host_names: bool) -> str:
    if show_host_names and row.host_name not in ("", "N/A", row.host):
        return f"{row.host} ({row.host_name})"
    return row.host


def format_text(
    rows: Sequence[NodeRow], *, local_id: int | None, timestamp: str, show_host_names: bool
) -> str:
    """The ``-N`` text report."""
    out = [LEGEND, timestamp, "Nodes:"]
    for row in rows:
        host = _host_text(row, show_host_names)
        if row.node_id == local_id:
            head = f"Node #{row.node_id:<4}* {host} *  "
        else:
            head = f"Node #{row.node_id:<4}- {host:<16}"
        line = f"{head}- {row.status:<21}"
        out.append(f"{line}- Version: {row.version}" if row.version else line.rstrip())
    ids = [row.node_id for row in rows]
    out.append("")
    out.append((" Nodes From\\To  " + "".join(f"{t:<4}" for t in ids)).rstrip())
    for row in rows:
        cells = "".join(f"{row.link(t).code:<4}" for t in ids)
        out.append(f"{row.node_id:>8}        {cells}".rstrip())
    out.append("")
    out.append(f"Domain State: {domain_status(rows)}")
    return "\n".join(out) + "\n"


def to_json(rows: Sequence[NodeRow], *, timestamp: str) -> dict[str, Any]:
    """The ``-N -j`` document."""
    hosts = {row.node_id: row.host for row in rows}
    nodes: dict[str, Any] = {}
    for row in rows:
        nodes[str(row.node_id)] = {
            "status": row.status,
            "host": row.host,
            "hostName": row.host_name,
            "connections": {
                str(t): {"host": hosts[t], "status": row.link(t).value, "changed": True}
                for t in hosts
            },
            "changed": True,
            "version": row.version,
        }
    return {"nodes": nodes, "timestamp": timestamp, "status": domain_status(rows)}


def format_json(rows: Sequence[NodeRow], *, timestamp: str) -> str:
    """The ``-N -j`` output text."""
    return json.dumps(to_json(rows, timestamp=timestamp), indent=2) + "\n"
