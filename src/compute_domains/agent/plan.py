"""What the resident agent runs next, from what runs now and what its Node asks (pure).

At most one ``nvidia-imex`` per node: the agent runs either one per-domain CD's daemon
(:class:`config.Assignment`) or the clique's shared IMEX (:class:`config.Shared`), never both.
:func:`choose` keeps what runs while the Node still asks for it, even when the Node also asks
for the other kind (the plugin refuses claims of the other scope on such a node, so that ask
is an anomaly, reported as a warning):

* a running shared IMEX is kept while the label and the clique ID stay; a per-domain CD asked
  meanwhile is not served;
* a served per-domain CD is kept while its label stays; the shared IMEX asked meanwhile starts
  only after it stops;
* otherwise what runs (if anything) stops, and the next thing starts: the shared IMEX when
  asked, else the asked CD unless it was declined (it has its own per-CD DaemonSet).

:func:`awaits_shared` says when an idle agent is still waiting for its Node's ask: with eager
shared IMEX (``AgentSettings.shared_imex_eager``) the kubelet plugin labels every node with a
clique ID that no per-domain CD holds, so such a node asking nothing yet will ask for the shared
IMEX; the agent is not Ready meanwhile (its ``/readyz``), rather than Ready now and NotReady
for the IMEX start once the label comes.
"""

from __future__ import annotations

import dataclasses

from compute_domains.agent.config import Assignment, Shared, Wants

Running = Assignment | Shared
"""What the agent runs: one CD's daemon, or the clique's shared IMEX."""


@dataclasses.dataclass(frozen=True, slots=True)
class Choice:
    """The agent's next move."""

    keep: bool
    """What runs stays (nothing stops, nothing starts)."""
    start: Running | None = None
    """Without ``keep``: what to start after stopping what runs (None: nothing)."""
    warning: str = ""
    """An anomaly of the Node's ask, to log ("" none)."""


def choose(running: Running | None, wants: Wants, declined: Assignment | None = None) -> Choice:
    """The next move for an agent running ``running`` whose Node asks ``wants``."""
    both = wants.domain is not None and wants.shared is not None
    if isinstance(running, Shared) and wants.shared == running:
        warning = (
            f"the node asks for per-domain CD {wants.domain.domain_uid} while the shared IMEX "
            f"of clique {running.clique_id} runs; not serving it (one nvidia-imex per node)"
            if wants.domain is not None
            else ""
        )
        return Choice(keep=True, warning=warning)
    if isinstance(running, Assignment) and wants.domain == running:
        warning = (
            f"the node asks for the shared IMEX while per-domain CD {running.domain_uid} is "
            "served; it starts once that CD leaves the node"
            if wants.shared is not None
            else ""
        )
        return Choice(keep=True, warning=warning)
    if wants.shared is not None:
        warning = (
            f"the node asks for both the shared IMEX and per-domain CD {wants.domain.domain_uid}; "
            "running the shared IMEX (one nvidia-imex per node)"
            if both and wants.domain is not None
            else ""
        )
        return Choice(keep=False, start=wants.shared, warning=warning)
    if wants.domain is not None and wants.domain != declined:
        return Choice(keep=False, start=wants.domain)
    return Choice(keep=False)


def awaits_shared(running: Running | None, wants: Wants, eager: bool) -> bool:
    """Whether an agent running ``running`` waits for the shared-IMEX label its Node will get:
    eager shared IMEX, a node with a clique ID, nothing running and nothing asked (no CD, no
    warm-spare CD, no shared IMEX)."""
    return (
        eager
        and running is None
        and bool(wants.clique_id)
        and wants.domain is None
        and wants.shared is None
    )
