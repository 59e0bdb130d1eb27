"""Names shared with upstream: API group and kinds, driver and DeviceClass names, label keys.

Every string here is part of the compatibility contract (ARCHITECTURE.md §1): existing manifests,
node labels, finalizers and the objects of a running cluster depend on these exact values, so they
are never changed, only added to. Naming helpers build the per-ComputeDomain object names from a
CD's UID so that the controller, the kubelet plugin and the daemon agree without talking.
"""

from __future__ import annotations

import hashlib
from typing import Final

GROUP: Final = "resource.nvidia.com"
"""API group of both CRDs and of the opaque claim configs."""
VERSION: Final = "v1beta1"
"""The one served and stored version."""
API_VERSION: Final = f"{GROUP}/{VERSION}"
"""``apiVersion`` of ComputeDomain, ComputeDomainClique and the opaque configs."""

COMPUTE_DOMAIN_KIND: Final = "ComputeDomain"
COMPUTE_DOMAIN_LIST_KIND: Final = "ComputeDomainList"
COMPUTE_DOMAIN_PLURAL: Final = "computedomains"
COMPUTE_DOMAIN_SINGULAR: Final = "computedomain"
CLIQUE_KIND: Final = "ComputeDomainClique"
CLIQUE_LIST_KIND: Final = "ComputeDomainCliqueList"
CLIQUE_PLURAL: Final = "computedomaincliques"
CLIQUE_SINGULAR: Final = "computedomainclique"
CHANNEL_CONFIG_KIND: Final = "ComputeDomainChannelConfig"
"""Opaque config kind carried by the workload (channel) claim."""
DAEMON_CONFIG_KIND: Final = "ComputeDomainDaemonConfig"
"""Opaque config kind carried by the daemon claim."""

DRIVER_NAME: Final = "compute-domain.nvidia.com"
"""The DRA driver name: ResourceSlices, opaque config ``driver``, plugin registration."""
CHANNEL_DEVICE_CLASS: Final = "compute-domain-default-channel.nvidia.com"
"""DeviceClass of workload claims (selects ``type == 'channel' && id == 0``)."""
DAEMON_DEVICE_CLASS: Final = "compute-domain-daemon.nvidia.com"
"""DeviceClass of daemon claims (selects ``type == 'daemon'``)."""
CHANNEL_DEVICE_TYPE: Final = "channel"
"""Value of the ``type`` attribute of the channel device."""
DAEMON_DEVICE_TYPE: Final = "daemon"
"""Value of the ``type`` attribute of the daemon device."""
CHANNEL_REQUEST: Final = "channel"
"""Request name in the workload ResourceClaimTemplate."""
DAEMON_REQUEST: Final = "daemon"
"""Request name in the daemon ResourceClaimTemplate."""
DAEMON_POD_CLAIM: Final = "compute-domain-daemon"
"""Name of the claim entry in the daemon pod spec (and of its container)."""

COMPUTE_DOMAIN_LABEL: Final = "resource.nvidia.com/computeDomain"
"""Label whose value is a CD UID: on nodes (pulls the daemon there), daemon objects, cliques."""
FINALIZER: Final = COMPUTE_DOMAIN_LABEL
"""Finalizer on the CD, its DaemonSet and both ResourceClaimTemplates (same string as the label)."""
CLIQUE_ID_LABEL: Final = "resource.nvidia.com/computeDomain.cliqueID"
"""Label on daemon pods and cliques: the node's clique ID, empty on non-fabric nodes."""
TARGET_LABEL: Final = "resource.nvidia.com/computeDomainTarget"
"""Label on the generated ResourceClaimTemplates; value ``TARGET_DAEMON`` or ``TARGET_WORKLOAD``."""
TARGET_DAEMON: Final = "Daemon"
TARGET_WORKLOAD: Final = "Workload"
GPU_CLIQUE_LABEL: Final = "nvidia.com/gpu.clique"
"""Node label set by GPU Feature Discovery (``<clusterUUID>.<cliqueId>``); for user affinity."""
GPU_PRESENT_LABEL: Final = "nvidia.com/gpu.present"
"""Node label (``"true"``) that Node Feature Discovery sets on GPU nodes; the chart's plugin
DaemonSet selects them by it."""

DAEMON_HEALTH_PATH: Final = "/readyz"
"""Path every probe of the daemon container asks (on its metrics port): 200 while its own IMEX
check sees READY."""
DAEMON_SERVICE_ACCOUNT: Final = "compute-domain-daemon-service-account"
"""ServiceAccount of the daemon pods, created by the Helm chart in the driver namespace."""
DEFAULT_MAX_NODES_PER_IMEX_DOMAIN: Final = 18
"""Default number of daemon slots (indices ``0..17``) per clique of one CD."""
NON_FABRIC_INDEX: Final = -1
"""Index of a ``status.nodes`` entry for a node that has no clique (no IMEX daemon)."""

DNS_SUBDOMAIN_MAX_LENGTH: Final = 253
"""Longest allowed object name (RFC 1123 subdomain), e.g. of the CD's ResourceClaimTemplate."""
_DNS_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN_REGEX: Final = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
"""Unanchored RFC 1123 subdomain expression (match it whole); the CRD's ``pattern`` is built
from it, so the schema and the tests that generate names cannot disagree."""
DNS_SUBDOMAIN_PATTERN: Final = f"^{DNS_SUBDOMAIN_REGEX}$"
"""The anchored form, for an OpenAPI ``pattern``."""

_DAEMON_PREFIX: Final = "computedomain-daemon-"
_IMEX_DNS_PREFIX: Final = "compute-domain-daemon-"


def daemon_object_name(domain_uid: str) -> str:
    """Name of a CD's daemon DaemonSet and daemon ResourceClaimTemplate (driver namespace)."""
    return f"{_DAEMON_PREFIX}{domain_uid}"


def clique_id(cluster_uuid: str, clique_number: int | str) -> str:
    """A node's clique ID as upstream formats it: ``<clusterUUID>.<cliqueNumber>``."""
    return f"{cluster_uuid}.{clique_number}"


LAST_INDICES_ANNOTATION = f"{GROUP}/lastIndices"
"""On a clique: JSON node → the index that node last held, so a replaced daemon rejoins on it."""

INDEX_REVISION_ANNOTATION = f"{GROUP}/indexRevision"
"""On a clique: how many times the controller changed its entries (a decimal string). Each of the
controller's writes tests it and counts it up, so two writers of indices can never both succeed
from the same state; the daemons' own writes never touch it."""

LOST_PEERS_ANNOTATION_PREFIX: Final = "compute-domains/lost-peers."
"""On a clique (ours only): ``<prefix><index>`` is written by the daemon at that index, only when
it changes, with the peers of its clique its IMEX has lost the links to for longer than its
bound: JSON ``{"node": <its node>, "ip": <its pod IP>, "lost": {<peer node>: <since, RFC 3339>}}``;
absent while it has lost none. An annotation, not a field of the entry: the clique's schema is
NVIDIA's, and an unknown field of an entry would be pruned by the API server."""


IMEX_BLOCKED_ANNOTATION: Final = "compute-domains/imex-blocked"
"""On a daemon (or resident agent) pod while its ``nvidia-imex`` cannot start for a reason a
person must act on (a host ``nvidia-imex.service`` holding the node's IMEX session): what is
wrong, in words; the CD status names it for the node. Removed once IMEX passes its own check."""

WARM_NODES_ANNOTATION: Final = "compute-domains/warm-nodes"
"""On a ComputeDomain (ours only; NVIDIA's driver ignores it): a label selector of the nodes that
get the CD's daemon before any workload claim is prepared there (warm spares, issue 16). Its own
prefix, not NVIDIA's group, because it is our addition to their manifests."""

WARM_FOR_LABEL: Final = "compute-domains/warm-for"
"""Node label set by the controller on the nodes a CD's ``WARM_NODES_ANNOTATION`` selects: the
CD's UID. The CD's DaemonSet runs there, and the plugin treats the node as held by that CD."""


def clique_object_name(domain_uid: str, clique_id: str) -> str:
    """Name of the ComputeDomainClique of one CD and one clique: ``<cdUID>.<cliqueID>``."""
    return f"{domain_uid}.{clique_id}"


IMEX_UNFILLED_SLOT_ADDRESS: Final = "127.0.0.2"
"""Where a daemon's hosts block points the IMEX names of unfilled slots by default: upstream's
sentinel (PR #1465), a loopback address no pod has (the simulator's pods are 127.64.0.0 and
above), so IMEX's endless dialling of an empty slot never asks cluster DNS."""

IMEX_DNS_INFIX_LENGTH: Final = 10
"""Hex digits of an IMEX domain's name infix (upstream's names carry ten, e.g.
``compute-domain-daemon-8585d4965d-0000``)."""


def imex_dns_infix(domain: str) -> str:
    """The name infix of IMEX domain ``domain``: the first ``IMEX_DNS_INFIX_LENGTH`` hex digits
    of its identity's SHA-256; "" for "".

    ``domain`` is the IMEX domain's identity: a CD's UID for the CD's own IMEX domain, the
    shared registry's name ``shared-imex.<cliqueID>`` for a clique's shared one. IMEX takes
    two daemons whose node maps are equal for the same domain (upstream #1447), so the names
    must differ between domains: a reused pod IP then never makes one domain's message land
    in another (docs/decisions/0016).
    """
    if not domain:
        return ""
    digest = hashlib.sha256(domain.encode()).hexdigest()
    return digest[:IMEX_DNS_INFIX_LENGTH]


def imex_dns_name(index: int, domain: str = "") -> str:
    """The IMEX peer DNS name of a daemon slot of IMEX domain ``domain`` (see
    :func:`imex_dns_infix`): ``compute-domain-daemon-<infix>-%04d``; without a domain,
    NVIDIA's ``compute-domain-daemon-%04d`` (the same in every domain).

    Raises:
        ValueError: ``index`` is negative (non-fabric nodes have no IMEX peer name).
    """
    if index < 0:
        raise ValueError(f"IMEX daemon index must be >= 0, got {index}")
    infix = imex_dns_infix(domain)
    return f"{_IMEX_DNS_PREFIX}{infix}-{index:04d}" if infix else f"{_IMEX_DNS_PREFIX}{index:04d}"


CHANNEL_HOLDER_ATTRIBUTE: Final = "domain"
"""Attribute (in the driver's domain) of every channel slot of a node held by a CD: the holder's
UID. The plugin publishes it, the controller's workload claim template selects on it."""


def channel_selector(domain_uid: str) -> str:
    """CEL of a workload claim of CD ``domain_uid``: a channel slot of a free node (no ``domain``
    attribute) or of a node this CD holds already."""
    attr = f'device.attributes["{DRIVER_NAME}"]'
    return (
        f"!has({attr}.{CHANNEL_HOLDER_ATTRIBUTE}) || "
        f'{attr}.{CHANNEL_HOLDER_ATTRIBUTE} == "{domain_uid}"'
    )
