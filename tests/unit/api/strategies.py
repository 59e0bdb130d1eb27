"""Hypothesis strategies for the api models (shared by the round-trip tests)."""

from __future__ import annotations

from hypothesis import strategies as st
from lightkube.models.meta_v1 import ObjectMeta

from compute_domains.api import conditions, names
from compute_domains.api.clique import CliqueDaemon, ComputeDomainClique
from compute_domains.api.computedomain import (
    AllocationMode,
    ChannelSpec,
    ComputeDomain,
    ComputeDomainNode,
    ComputeDomainSpec,
    ComputeDomainStatus,
    Readiness,
    ResourceClaimTemplateRef,
)

dns_names = st.from_regex(names.DNS_SUBDOMAIN_REGEX, fullmatch=True).filter(
    lambda s: len(s) <= names.DNS_SUBDOMAIN_MAX_LENGTH
)
texts = st.text(max_size=40)
clique_ids = st.one_of(
    st.just(""), st.builds(lambda u, n: f"{u}.{n}", st.uuids(), st.integers(0, 99))
)
indices = st.integers(min_value=-1, max_value=2**31 - 1)

specs = st.builds(
    ComputeDomainSpec,
    channel=st.builds(
        ChannelSpec,
        resource_claim_template=st.builds(ResourceClaimTemplateRef, name=dns_names),
        allocation_mode=st.sampled_from(AllocationMode),
    ),
    num_nodes=st.integers(min_value=0, max_value=2**31 - 1),
)
nodes = st.builds(
    ComputeDomainNode,
    name=dns_names,
    ip_address=texts,
    clique_id=clique_ids,
    index=indices,
    status=st.sampled_from(Readiness),
)
reasons = st.from_regex(r"[A-Za-z]([A-Za-z0-9_,:]{0,20}[A-Za-z0-9_])?", fullmatch=True)
condition_list = st.lists(
    st.builds(
        conditions.Condition,
        type=st.sampled_from([conditions.READY, conditions.DELETING]),
        status=st.sampled_from(["True", "False", "Unknown"]),
        reason=reasons,
        message=texts,
        last_transition_time=st.just("2026-12-01T10:00:00Z"),
        observed_generation=st.integers(min_value=0, max_value=2**31 - 1),
    ),
    max_size=2,
    unique_by=lambda c: c.type,
).map(tuple)
statuses = st.builds(
    ComputeDomainStatus,
    status=st.sampled_from(Readiness),
    nodes=st.lists(nodes, max_size=5, unique_by=lambda n: n.name).map(tuple),
    conditions=condition_list,
)
metas = st.builds(
    lambda name, ns, uid: ObjectMeta(name=name, namespace=ns, uid=str(uid)),
    dns_names,
    dns_names,
    st.uuids(),
)
computedomains = st.builds(ComputeDomain, metadata=metas, spec=specs, status=st.none() | statuses)
daemons = st.builds(
    CliqueDaemon,
    node_name=dns_names,
    ip_address=texts,
    clique_id=clique_ids,
    index=st.integers(min_value=0, max_value=17),
    status=st.sampled_from(Readiness),
)
cliques = st.builds(
    ComputeDomainClique,
    metadata=metas,
    daemons=st.lists(daemons, max_size=5, unique_by=lambda d: d.node_name).map(tuple),
)
