"""What the resident agent runs next: at most one nvidia-imex, what runs is kept while asked."""

from __future__ import annotations

import pytest

from compute_domains.agent import plan
from compute_domains.agent.config import Assignment, Shared, Wants

X = Assignment("x", "c.1")
Y = Assignment("y", "c.1")
C1 = Shared("c.1")
C2 = Shared("c.2")


@pytest.mark.parametrize(
    ("running", "wants", "declined", "keep", "start", "warns"),
    [
        (None, Wants(), None, False, None, False),
        (None, Wants(domain=X), None, False, X, False),
        (None, Wants(domain=X), X, False, None, False),
        (None, Wants(shared=C1), None, False, C1, False),
        (None, Wants(domain=X, shared=C1), None, False, C1, True),
        (C1, Wants(shared=C1), None, True, None, False),
        (C1, Wants(domain=X, shared=C1), None, True, None, True),
        (C1, Wants(), None, False, None, False),
        (C1, Wants(domain=X), None, False, X, False),
        (C1, Wants(shared=C2), None, False, C2, False),
        (X, Wants(domain=X), None, True, None, False),
        (X, Wants(domain=X, shared=C1), None, True, None, True),
        (X, Wants(shared=C1), None, False, C1, False),
        (X, Wants(domain=Y), None, False, Y, False),
        (X, Wants(), None, False, None, False),
    ],
    ids=[
        "idle",
        "idle-domain",
        "idle-declined",
        "idle-shared",
        "idle-both-shared-first",
        "shared-kept",
        "shared-kept-domain-refused",
        "shared-label-gone",
        "shared-gone-domain-next",
        "clique-changed",
        "domain-kept",
        "domain-kept-shared-waits",
        "domain-gone-shared-next",
        "domain-changed",
        "domain-gone",
    ],
)
def test_choose(
    running: plan.Running | None,
    wants: Wants,
    declined: Assignment | None,
    keep: bool,
    start: plan.Running | None,
    warns: bool,
) -> None:
    choice = plan.choose(running, wants, declined)
    assert (choice.keep, choice.start, bool(choice.warning)) == (keep, start, warns)


@pytest.mark.parametrize(
    ("running", "wants", "eager", "awaits"),
    [
        (None, Wants(clique_id="c.1"), True, True),
        (None, Wants(clique_id="c.1"), False, False),
        (None, Wants(), True, False),
        (None, Wants(domain=X, clique_id="c.1"), True, False),
        (None, Wants(shared=C1, clique_id="c.1"), True, False),
        (C1, Wants(clique_id="c.1"), True, False),
        (X, Wants(clique_id="c.1"), True, False),
    ],
    ids=[
        "idle-clique-eager",
        "not-eager",
        "no-clique",
        "domain-asked",
        "shared-asked",
        "shared-running",
        "domain-running",
    ],
)
def test_awaits_shared(
    running: plan.Running | None, wants: Wants, eager: bool, awaits: bool
) -> None:
    assert plan.awaits_shared(running, wants, eager) is awaits
