"""A ComputeDomain's isolation scope: fixed at its first reconcile, never changed.

The contract is ``api.sharedimex``'s; ``admit`` (pure) decides, for one CD's annotations and
finalizers, which scope the controller serves, what it writes onto the CD, and what it refuses;
``Scopes.admit`` (the reconcile's first step) applies it and tells people. The rules:

- **First reconcile** (our finalizer absent): the scope is the CD's ``compute-domains/imex-scope``
  annotation, or the cluster default (``ControllerSettings.default_imex_scope``) written onto it
  when absent. It is recorded in ``compute-domains/imex-scope-fixed``, in the same patch that adds
  our finalizer (``reconcile``), before anything is created for the CD; so every later reader
  (the plugin, a new leader) sees the scope the CD was created with.
- **A CD an earlier controller admitted** (our finalizer present, nothing fixed): it was served
  per domain (earlier controllers knew no other scope), so ``perDomain`` is fixed for it, and
  written as its scope annotation too when it has none.
- **Refused at creation**, with nothing written and nothing created (NotReady, a Warning Event):
  an annotation that names no scope (``InvalidImexScope``, ``sharedimex.scope_of``'s message),
  and ``perClique`` while the controller runs per-CD DaemonSets (``ImexScopeNeedsResidentAgents``:
  the shared IMEX is the resident agent's). Nothing is fixed, so correcting the annotation (or
  the agents' mode) lets the CD be admitted as it then says.
- **A later edit** of the annotation (another value, a bad one, or removed): refused. The fixed
  scope keeps being served; the ``ImexScope`` condition (``ScopeChangeRefused``) and a Warning
  Event say that the scope is fixed at creation and that moving means deleting the CD and
  creating it again. The annotation is not written back: a GitOps tool re-applying the user's
  manifest would fight us, and the fixed annotation already says what is served.
- **A per-clique CD with ``allocationMode: All``** is admitted (its scope fixed) but gets no
  workload template (``all_channels_refusal``): all channels would open every other CD's memory
  on the clique's shared IMEX domain to its pods.

The write is one merge patch of the annotations and our finalizer, guarded by the read
resourceVersion (a concurrent edit of the CD fails it and the reconcile is retried). Each
refusal is told once, by a Warning Event, while it lasts.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from compute_domains.api import conditions, names, sharedimex
from compute_domains.api.computedomain import AllocationMode, ComputeDomain, ComputeDomainResource
from compute_domains.api.sharedimex import Scope
from compute_domains.controller import caches, config, events, kubeapi

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Refusal:
    """Why the controller serves the CD not at all (the Ready reason and its message)."""

    reason: str
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Admission:
    """What ``admit`` decided for one CD."""

    scope: Scope | None
    """The scope served; None when refused."""
    write: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Annotations to write onto the CD (empty: nothing)."""
    refusal: Refusal | None = None
    """Set when nothing may be created for the CD."""
    changed: str = ""
    """The ``ImexScope`` condition's message while the annotation disagrees with the fixed
    scope ("" when it agrees)."""

    def condition(self, generation: int) -> conditions.Condition | None:
        """The ``ImexScope`` condition (None while the annotation agrees)."""
        if not self.changed:
            return None
        return conditions.Condition(
            type=conditions.IMEX_SCOPE,
            status=conditions.FALSE,
            reason=conditions.SCOPE_CHANGE_REFUSED,
            message=self.changed,
            observed_generation=generation,
        )


def _changed_text(fixed: Scope, raw: str | None) -> str:
    other = Scope.PER_CLIQUE if fixed is Scope.PER_DOMAIN else Scope.PER_DOMAIN
    now = "is gone" if raw is None else f"now says {raw!r}"
    return (
        f"the IMEX scope is fixed at creation: this ComputeDomain is served {fixed.value} "
        f"({sharedimex.FIXED_SCOPE_ANNOTATION}), and its annotation {sharedimex.SCOPE_ANNOTATION} "
        f"{now}, which is ignored; to move it to {other.value}, delete the ComputeDomain and "
        f"create it again with {sharedimex.SCOPE_ANNOTATION}={other.value}"
    )


def _needs_agents_text() -> str:
    return (
        f"annotation {sharedimex.SCOPE_ANNOTATION}={Scope.PER_CLIQUE.value}: the per-clique scope "
        "needs the resident IMEX agents (chart value imex.agents=resident), and this cluster's "
        "controller runs per-ComputeDomain DaemonSets (imex.agents=perComputeDomain); nothing is "
        "created for this ComputeDomain. Install with imex.agents=resident, or set the "
        f"annotation to {Scope.PER_DOMAIN.value}"
    )


def admit(
    annotations: Mapping[str, str] | None,
    finalizers: Sequence[str] | None,
    *,
    default: Scope,
    resident: bool,
) -> Admission:
    """The scope of a CD with these ``annotations`` and ``finalizers`` (see the module
    docstring); ``resident``: the controller runs with resident agents."""
    annotations = annotations or {}
    raw = annotations.get(sharedimex.SCOPE_ANNOTATION)
    fixed_raw = annotations.get(sharedimex.FIXED_SCOPE_ANNOTATION)
    admitted = names.FINALIZER in (finalizers or [])
    fixed: Scope | None = None
    if fixed_raw is not None and fixed_raw in {s.value for s in Scope}:
        fixed = Scope(fixed_raw)
    if fixed is None and admitted:
        # An earlier controller's CD (served per domain), or a fixed value broken by hand:
        # the annotation says what the CD asked for when that is a scope, else per domain.
        try:
            fixed = sharedimex.scope_of(annotations) if fixed_raw is not None else Scope.PER_DOMAIN
        except ValueError:
            fixed = Scope.PER_DOMAIN
        write = {sharedimex.FIXED_SCOPE_ANNOTATION: fixed.value}
        if raw is None:
            write[sharedimex.SCOPE_ANNOTATION] = fixed.value
            raw = fixed.value
        changed = "" if raw == fixed.value else _changed_text(fixed, raw)
        return Admission(scope=fixed, write=write, changed=changed)
    if fixed is not None:
        changed = "" if raw == fixed.value else _changed_text(fixed, raw)
        return Admission(scope=fixed, changed=changed)
    try:
        scope = sharedimex.scope_of(annotations, default)
    except ValueError as err:
        message = (
            f"{err}; nothing is created for this ComputeDomain until the annotation names a "
            f"scope (or is removed: the cluster's default, {default.value}, then applies)"
        )
        return Admission(
            scope=None, refusal=Refusal(reason=conditions.INVALID_IMEX_SCOPE, message=message)
        )
    if scope is Scope.PER_CLIQUE and not resident:
        refusal = Refusal(
            reason=conditions.IMEX_SCOPE_NEEDS_RESIDENT_AGENTS, message=_needs_agents_text()
        )
        return Admission(scope=None, refusal=refusal)
    write = {sharedimex.FIXED_SCOPE_ANNOTATION: scope.value}
    if raw is None:
        write[sharedimex.SCOPE_ANNOTATION] = scope.value
    return Admission(scope=scope, write=write)


def all_channels_refusal(template: str) -> Refusal:
    """Why a per-clique CD with ``allocationMode: All`` gets no workload template."""
    message = (
        f"allocationMode All would give each pod all {sharedimex.CHANNEL_LIMIT} IMEX channels, "
        "and in the per-clique scope that lets the pod import the memory of every other "
        "ComputeDomain on the clique's shared IMEX domain; use allocationMode Single, or the "
        f"perDomain scope ({sharedimex.SCOPE_ANNOTATION}={Scope.PER_DOMAIN.value} at creation). "
        f"The ResourceClaimTemplate {template} is not created, so the job's pods stay Pending"
    )
    return Refusal(reason=conditions.ALLOCATION_MODE_ALL_NOT_ISOLATED, message=message)


def fixed_scope(annotations: Mapping[str, str] | None) -> Scope | None:
    """The scope fixed on a cached CD (None while the controller has not admitted it)."""
    raw = (annotations or {}).get(sharedimex.FIXED_SCOPE_ANNOTATION)
    return Scope(raw) if raw in {s.value for s in Scope} else None


class Scopes:
    """Applies ``admit`` to CDs and tells each refusal once (the reconcile's first step)."""

    def __init__(
        self,
        api: kubeapi.Api,
        cache: caches.Caches,
        settings: config.ControllerSettings,
        recorder: events.EventRecorder,
    ) -> None:
        self._api = api
        self._cache = cache
        self._settings = settings
        self._events = recorder
        self._told: dict[str, frozenset[str]] = {}
        """CD UID → the refusals a Warning Event told (each told once while it lasts)."""

    def forget(self, domain_uid: str) -> None:
        """CD ``domain_uid`` is gone (or going)."""
        self._told.pop(domain_uid, None)

    async def admit(self, raw: Any, cd: ComputeDomain) -> tuple[Admission, Refusal | None]:
        """Admit the cached CD ``raw`` (its decoded ``cd``): tell what is refused, then fix its
        scope and add our finalizer unless it is refused at creation. Returns the admission and
        what keeps its workload template from being made (None: nothing).

        Raises:
            errors.ComputeDomainsError: the write failed (retry later).
        """
        admission = admit(
            raw.metadata.annotations,
            raw.metadata.finalizers,
            default=self._settings.default_imex_scope,
            resident=not self._settings.per_cd_daemons,
        )
        refused = admission.refusal
        all_channels = cd.spec.channel.allocation_mode is AllocationMode.ALL
        if refused is None and admission.scope is Scope.PER_CLIQUE and all_channels:
            refused = all_channels_refusal(cd.spec.channel.resource_claim_template.name)
        await self._tell(raw, refused, admission.changed)
        if admission.refusal is None:
            await self._write(raw, admission.write)
        return admission, refused

    async def _write(self, raw: Any, write: Mapping[str, str]) -> None:
        present = list(raw.metadata.finalizers or [])
        if names.FINALIZER in present and not write:
            return
        meta: dict[str, Any] = {"resourceVersion": raw.metadata.resourceVersion}
        if names.FINALIZER not in present:
            meta["finalizers"] = [*present, names.FINALIZER]
        if write:
            meta["annotations"] = dict(write)
        name, namespace = raw.metadata.name, raw.metadata.namespace
        updated = await self._api.patch(
            ComputeDomainResource, name, {"metadata": meta}, namespace=namespace
        )
        self._cache.cds.observe(updated)
        if sharedimex.FIXED_SCOPE_ANNOTATION in write:
            logger.info(
                "IMEX scope %s fixed",
                write[sharedimex.FIXED_SCOPE_ANNOTATION],
                extra={"cd": f"{namespace}/{name}"},
            )

    async def _tell(self, raw: Any, refused: Refusal | None, changed: str) -> None:
        meta = raw.metadata
        said = self._told.get(meta.uid, frozenset())
        now: dict[str, str] = {}
        if refused is not None:
            now[refused.message] = _EVENT_REASONS.get(refused.reason, refused.reason)
        if changed:
            now[changed] = events.IMEX_SCOPE_FIXED
        self._told[meta.uid] = frozenset(now)
        target = events.Target(namespace=meta.namespace, name=meta.name, uid=meta.uid)
        for message, reason in now.items():
            if message not in said:
                logger.warning("%s", message, extra={"cd": f"{meta.namespace}/{meta.name}"})
                await self._events.emit(target, events.WARNING, reason, message)


_EVENT_REASONS = {
    conditions.INVALID_IMEX_SCOPE: events.INVALID_IMEX_SCOPE,
    conditions.IMEX_SCOPE_NEEDS_RESIDENT_AGENTS: events.IMEX_SCOPE_NEEDS_RESIDENT_AGENTS,
    conditions.ALLOCATION_MODE_ALL_NOT_ISOLATED: events.ALLOCATION_MODE_ALL_NOT_ISOLATED,
}
"""Event reason of each refusal (the condition's reason, spelt as an Event's)."""
