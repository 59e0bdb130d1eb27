"""A channel claim's isolation scope and the per-clique scope's permanent refusals (pure).

The scope is the claim's ComputeDomain's (``sharedimex.effective_scope``: the one the controller
fixed, else its annotation; absent means ``perDomain``, today's path unchanged). In the
per-clique scope a channel number is the only wall between the CDs of a clique's shared IMEX
domain, so what would cross it, or cannot work at all, is refused for good
(``PermanentError``: retrying cannot help; the kubelet shows the text in the pod's events):

- a node without a clique ID (no multi-node NVLink, so no clique IMEX domain to join):
  ``per-clique scope needs multi-node NVLink: node has no clique ID``;
- ``allocationMode: All``: every channel would let the pod import every other ComputeDomain's
  memory on the shared domain.
"""

from __future__ import annotations

from compute_domains.api import sharedimex
from compute_domains.api.computedomain import AllocationMode, ComputeDomain
from compute_domains.api.configs import ComputeDomainChannelConfig
from compute_domains.infra import errors
from compute_domains.plugin import configs

Scope = sharedimex.Scope


def of(cd: ComputeDomain) -> Scope:
    """The scope of ``cd``.

    Raises:
        errors.PermanentError: its scope annotation names no scope.
    """
    try:
        return sharedimex.effective_scope(cd.metadata.annotations)
    except ValueError as err:
        raise errors.PermanentError(f"ComputeDomain {cd.namespace}/{cd.name}: {err}") from err


def check_per_clique(plan: configs.Plan, cd: ComputeDomain, *, node: str, clique_id: str) -> None:
    """Refuse what a per-clique CD's channel claim can never do on this node.

    Raises:
        errors.PermanentError: no clique ID here, or ``allocationMode: All``.
    """
    where = f"node {node}, ComputeDomain {cd.namespace}/{cd.name} in the {Scope.PER_CLIQUE} scope"
    if not clique_id:
        raise errors.PermanentError(
            f"per-clique scope needs multi-node NVLink: node has no clique ID ({where})"
        )
    for a in plan.assignments:
        config = a.config
        if (
            isinstance(config, ComputeDomainChannelConfig)
            and config.allocation_mode is AllocationMode.ALL
        ):
            raise errors.PermanentError(
                f"allocationMode All is refused for ComputeDomain {cd.namespace}/{cd.name} "
                f"(scope {Scope.PER_CLIQUE}): all {configs.ALL_CHANNELS} channels would let "
                "the pod import every other ComputeDomain's memory on the clique's shared IMEX "
                f"domain; use allocationMode Single, or the {Scope.PER_DOMAIN} scope"
            )
