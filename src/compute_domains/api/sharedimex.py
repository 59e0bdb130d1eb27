"""The per-clique isolation scope: one shared IMEX domain per clique, one channel per CD (pure).

Contract between the components (docs/isolation.md, docs/decisions/0015):

- **A CD's scope** is fixed when the controller first sees the CD: the annotation
  ``compute-domains/imex-scope`` (``perDomain`` or ``perClique``) set by the user is kept; a CD
  without it gets the cluster's default written onto it. A CD never changes scope while it
  exists, so switching the cluster's default applies to new CDs only. The controller records the
  scope it serves in ``compute-domains/imex-scope-fixed`` (``FIXED_SCOPE_ANNOTATION``) at that
  first reconcile, together with its finalizer; a later edit of ``imex-scope`` is refused (a
  Warning Event and the ``ImexScope`` condition) and the fixed scope keeps being served, so
  every component reads a CD's scope with ``effective_scope`` (the fixed one when present).
- **The shared registry** of clique ``C`` is the ComputeDomainClique ``shared-imex.<C>`` in the
  driver namespace, labelled ``compute-domains/imex-scope=perClique`` and with the clique ID
  label, and *without* the CD label (no CD's teardown touches it). Its ``daemons`` list holds one
  entry per node whose resident agent runs the clique's shared ``nvidia-imex`` (the agent writes
  its own entry and its readiness, without a resourceVersion: a new entry is appended, and the
  earliest entry claiming an index holds it, a later one is void until its agent moves it;
  ``agent.registry``, docs/decisions/0022; a node keeps its index for good). Its annotations
  ``compute-domains/channel.<cdUID>`` hold the channel number of each per-clique CD that has
  ever prepared a claim on the clique; a number is unique within the registry (``allocate``),
  in ``[FIRST_CHANNEL, CHANNEL_LIMIT)``, kept while the CD exists and released by the
  controller's teardown of the CD.
- **A node serving CD X in the per-clique scope** carries the annotation
  ``compute-domains/channel.<X>=<n>`` (the plugin writes it when it prepares X's first claim on
  the node and removes it with X's last), and the label ``compute-domains/shared-imex=on`` while
  its agent is to run (or runs) the shared IMEX; the plugin sets the label, the agent follows it.
- **What a node's shared IMEX reports** goes into annotations of the registry, keyed by the
  node's index there (the entries' schema is strict), each value naming the writer's node and
  pod IP, so a report of an earlier agent at that index is ignored: ``compute-domains/lost-peers.
  <index>`` (the peers its IMEX lost, ``names.LOST_PEERS_ANNOTATION_PREFIX``, the per-domain
  daemon's format) and ``compute-domains/imex-blocked.<index>`` (``BLOCKED_ANNOTATION_PREFIX``:
  why its ``nvidia-imex`` cannot start, ``Blocked``). The controller reads them for every CD the
  node serves.
- **The scheduler sees a node's scope** through the channel slots' ``domain`` attribute
  (``names.CHANNEL_HOLDER_ATTRIBUTE``): ``SHARED_HOLDER`` on a node in the per-clique scope, a
  CD's UID on a node a per-domain CD holds, none on a free node. A per-clique CD's template
  selects free or ``SHARED_HOLDER`` nodes (``channel_selector``), a per-domain CD's free or its
  own, so neither ever lands on a node of the other scope.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Final

from compute_domains.api import names

SCOPE_ANNOTATION: Final = "compute-domains/imex-scope"
"""On a ComputeDomain: its isolation scope (a ``Scope`` value)."""
FIXED_SCOPE_ANNOTATION: Final = "compute-domains/imex-scope-fixed"
"""On a ComputeDomain: the scope the controller fixed at its first reconcile (a ``Scope`` value);
it wins over ``SCOPE_ANNOTATION`` (``effective_scope``)."""
SCOPE_LABEL: Final = SCOPE_ANNOTATION
"""On a shared registry: ``perClique``."""
SHARED_IMEX_LABEL: Final = "compute-domains/shared-imex"
"""On a Node: ``on`` while its agent is to run the clique's shared IMEX."""
SHARED_IMEX_ON: Final = "on"
CHANNEL_ANNOTATION_PREFIX: Final = "compute-domains/channel."
"""``<prefix><cdUID>``: on a registry, the CD's channel in that clique; on a Node, the channel the
node serves the CD with."""
SHARED_HOLDER: Final = "shared-imex"
"""The ``domain`` attribute value of a node in the per-clique scope (never a CD UID)."""
FIRST_CHANNEL: Final = 1
"""Lowest channel handed to a CD: channel 0 is every host-managed IMEX's default channel, and a
pod given channel 0 by another driver must not import a per-clique CD's memory."""
CHANNEL_LIMIT: Final = 2048
"""Channel numbers are ``< CHANNEL_LIMIT`` (the driver's ``channel0`` … ``channel2047``)."""
BLOCKED_ANNOTATION_PREFIX: Final = "compute-domains/imex-blocked."
"""On a registry: ``<prefix><index>`` while the shared ``nvidia-imex`` of the node at that index
cannot start for a reason a person must act on (a host ``nvidia-imex.service`` holding the node's
IMEX session); JSON ``{"node", "ip", "reason", "message"}`` (``Blocked``), written by that node's
agent and removed once its IMEX passes its own check. The registry's counterpart of a daemon
pod's ``names.IMEX_BLOCKED_ANNOTATION``."""
_REGISTRY_PREFIX: Final = "shared-imex."


class Scope(enum.StrEnum):
    """Isolation scope of a ComputeDomain (the ``compute-domains/imex-scope`` annotation)."""

    PER_DOMAIN = "perDomain"
    PER_CLIQUE = "perClique"


class ChannelsExhaustedError(Exception):
    """Every channel number of the clique's shared IMEX domain is taken."""


def scope_of(annotations: Mapping[str, str] | None, default: Scope = Scope.PER_DOMAIN) -> Scope:
    """The scope a CD's annotations name; ``default`` when absent.

    Raises:
        ValueError: the annotation names no scope (its message says which values exist).
    """
    raw = (annotations or {}).get(SCOPE_ANNOTATION)
    if raw is None:
        return default
    try:
        return Scope(raw)
    except ValueError:
        known = ", ".join(s.value for s in Scope)
        raise ValueError(f"annotation {SCOPE_ANNOTATION}={raw!r} is not one of {known}") from None


def effective_scope(
    annotations: Mapping[str, str] | None, default: Scope = Scope.PER_DOMAIN
) -> Scope:
    """The scope a CD is served in: the fixed one (``FIXED_SCOPE_ANNOTATION``) once the
    controller wrote it, else what ``scope_of`` reads (a CD the controller has not seen yet).

    Raises:
        ValueError: no scope is fixed and the annotation names no scope.
    """
    fixed = (annotations or {}).get(FIXED_SCOPE_ANNOTATION)
    if fixed is not None:
        try:
            return Scope(fixed)
        except ValueError:
            pass  # written by hand: the user's annotation decides, as before admission
    return scope_of(annotations, default)


def registry_name(clique_id: str) -> str:
    """Name of the shared registry of clique ``clique_id``: ``shared-imex.<cliqueID>``."""
    return f"{_REGISTRY_PREFIX}{clique_id}"


def registry_labels(clique_id: str) -> dict[str, str]:
    """The labels of clique ``clique_id``'s shared registry (whoever creates it: plugin or
    agent): the scope and the clique ID, never a CD's label."""
    return {SCOPE_LABEL: Scope.PER_CLIQUE.value, names.CLIQUE_ID_LABEL: clique_id}


def is_registry_name(name: str) -> bool:
    """Whether ``name`` is a shared registry's (not a CD's ``<cdUID>.<cliqueID>``)."""
    return name.startswith(_REGISTRY_PREFIX)


def channel_key(domain_uid: str) -> str:
    """The annotation key of CD ``domain_uid``'s channel."""
    return f"{CHANNEL_ANNOTATION_PREFIX}{domain_uid}"


def channels(annotations: Mapping[str, str] | None) -> dict[str, int]:
    """CD UID → channel, from a registry's or a Node's annotations (malformed values skipped)."""
    out: dict[str, int] = {}
    for key, value in (annotations or {}).items():
        if not key.startswith(CHANNEL_ANNOTATION_PREFIX):
            continue
        try:
            channel = int(value)
        except ValueError:
            continue
        if FIRST_CHANNEL <= channel < CHANNEL_LIMIT:
            out[key.removeprefix(CHANNEL_ANNOTATION_PREFIX)] = channel
    return out


def allocate(annotations: Mapping[str, str] | None, domain_uid: str) -> tuple[int, bool]:
    """CD ``domain_uid``'s channel in a registry: ``(channel, new)``.

    The CD's existing number when it has one (``new`` False); else the lowest number no other CD
    holds (``new`` True: the caller writes ``channel_key(domain_uid)`` with a precondition).

    Raises:
        ChannelsExhaustedError: every number in ``[FIRST_CHANNEL, CHANNEL_LIMIT)`` is taken.
    """
    held = channels(annotations)
    if domain_uid in held:
        return held[domain_uid], False
    taken = set(held.values())
    for channel in range(FIRST_CHANNEL, CHANNEL_LIMIT):
        if channel not in taken:
            return channel, True
    raise ChannelsExhaustedError(
        f"all {CHANNEL_LIMIT - FIRST_CHANNEL} IMEX channels of the clique are held by other "
        "ComputeDomains"
    )


def channel_selector() -> str:
    """CEL of a per-clique CD's workload claim: a channel slot of a free node or of a node in
    the per-clique scope (never one a per-domain CD holds)."""
    attr = f'device.attributes["{names.DRIVER_NAME}"]'
    return (
        f"!has({attr}.{names.CHANNEL_HOLDER_ATTRIBUTE}) || "
        f'{attr}.{names.CHANNEL_HOLDER_ATTRIBUTE} == "{SHARED_HOLDER}"'
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Blocked:
    """Why a node's shared ``nvidia-imex`` cannot start (``BLOCKED_ANNOTATION_PREFIX``)."""

    reason: str
    """A CamelCase reason (the Event's), e.g. ``ImexSessionInUse``."""
    message: str
    """What is wrong and what to do, without the node (the CD status prefixes it)."""


def blocked_key(index: int) -> str:
    """The annotation key of the blocked note of the node at registry index ``index``."""
    return f"{BLOCKED_ANNOTATION_PREFIX}{index}"


def blocked_value(node: str, ip: str, blocked: Blocked) -> str:
    """The annotation value (JSON, keys sorted: the same note always reads the same)."""
    return json.dumps(
        {"node": node, "ip": ip, "reason": blocked.reason, "message": blocked.message},
        sort_keys=True,
    )


def blocked_of(
    annotations: Mapping[str, str] | None, *, index: int, node: str, ip: str
) -> Blocked | None:
    """The blocked note of the node at ``index`` when its writer is that node with pod IP ``ip``
    (None: absent, malformed, or written by an earlier agent)."""
    raw = (annotations or {}).get(blocked_key(index))
    try:
        data = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("node") != node or data.get("ip") != ip:
        return None
    reason, message = data.get("reason"), data.get("message")
    if not isinstance(reason, str) or not isinstance(message, str) or not message:
        return None
    return Blocked(reason=reason, message=message)
