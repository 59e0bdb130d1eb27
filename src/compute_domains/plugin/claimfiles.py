"""The files a prepared claim leaves on the node: the per-CD folder and the claim's CDI spec.

This is the blocking "apply" half of prepare step 3 (``state``); ``edits`` computes what to
write. For a daemon claim, or any claim on a node with a clique ID, the per-CD folder
``domains/<domain UID>`` (a per-clique claim: the shared IMEX folder ``domains/shared-imex``
instead, which no unprepare removes) exists afterwards (daemons write their IMEX config there,
workloads see it read-only, and a bind mount of a missing folder fails); a daemon claim also
gets the IMEX config template copied there when the plugin has one, and, on a fabric node, the
fabric-imex-mgmt capability read fresh. The claim's CDI spec is written, or removed when no
device has edits. Every step is idempotent, so a retried prepare redoes it safely.
``remove_domain_dir`` is the unprepare side: the folder goes with the CD's last claim here.
"""

from __future__ import annotations

import dataclasses
import shutil

from compute_domains.api.computedomain import ComputeDomain
from compute_domains.infra import errors
from compute_domains.plugin import cdi, checkpoint, configs, discovery, edits, nodeinfo
from compute_domains.plugin.config import PathSettings

_TEMPLATE_FILE = "imexd.cfg.tmpl"
"""Name of the IMEX config template in the per-CD folder (read by the daemon)."""


def write(
    claim_uid: str,
    plan: configs.Plan,
    cd: ComputeDomain,
    *,
    paths: PathSettings,
    facts: edits.NodeFacts,
    writer: cdi.CdiWriter,
    channel: int | None = None,
) -> tuple[checkpoint.PreparedDevice, ...]:
    """Blocking: per-CD folder, CDI spec; the devices to return to the kubelet.

    Args:
        channel: the CD's channel in the clique's shared IMEX domain (a per-clique claim: the
            shared IMEX folder is mounted instead of a per-CD folder); None otherwise.

    Raises:
        errors.TemporaryError: the capability file cannot be read, or a fact is missing.
    """
    host_dir = paths.shared_imex_dir if channel is not None else paths.domains_dir / cd.uid
    local_dir = paths.local(host_dir)
    if plan.has_daemon or facts.clique_id:
        # The agent's folder too: a bind mount of a missing folder fails the container.
        local_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
    if plan.has_daemon:
        template = paths.imex_config_template
        if template is not None:
            shutil.copyfile(template, local_dir / _TEMPLATE_FILE)
        if facts.clique_id:
            facts = dataclasses.replace(facts, imex_mgmt=_read_capability(paths))
    wanted = edits.container_edits(plan, facts=facts, cd=cd, domain_dir=host_dir, channel=channel)
    spec, prepared = edits.prepared_devices(claim_uid, plan, wanted)
    if spec is not None:
        writer.write_claim_spec(spec)
    else:
        writer.remove_claim_spec(claim_uid)
    return prepared


def remove_domain_dir(paths: PathSettings, domain_uid: str) -> bool:
    """Blocking: remove the per-CD folder of ``domain_uid`` and what is in it (the daemon's
    ``imexd.cfg``, ``nodes.cfg``); whether it was there."""
    local_dir = paths.local(paths.domains_dir / domain_uid)
    if not local_dir.exists():
        return False
    shutil.rmtree(local_dir, ignore_errors=True)
    return True


def _read_capability(paths: PathSettings) -> nodeinfo.CapabilityDevice:
    path = paths.fabric_imex_mgmt
    try:
        return discovery.parse_capability(path.read_text())
    except (OSError, nodeinfo.DiscoveryError) as err:
        raise errors.TemporaryError(
            f"reading the fabric-imex-mgmt capability {path}: {err}"
        ) from err
