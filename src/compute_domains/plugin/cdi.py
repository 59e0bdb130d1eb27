"""Build the per-claim CDI specs the plugin hands to the container runtime; write/remove them.

Names follow upstream so that tooling and runtimes see the same thing: vendor
``k8s.compute-domain.nvidia.com``, class ``claim`` for per-claim specs (and ``device`` for the
base spec, whose device ``all`` is referenced by daemon claims), device names
``<claimUID>-<allocatable device>`` (e.g. ``…-channel-0``), one file per claim.

Invariants:
- Building is pure (``build_claim_spec`` and the edit helpers do no IO); writing is one atomic
  replace per file through ``infra.atomicfile`` and removing a missing file is success.
- A device without edits gets no CDI device (an empty CDI device makes a runtime reject the whole
  file) and no CDI ID; when no device has edits there is no spec and no file.
- ``cdiVersion`` is the lowest version that covers the content (``0.5.0`` when the claim UID starts
  with a digit, else ``0.3.0`` for our edits), because older runtimes reject newer versions.
- We write JSON (a valid CDI format that needs no YAML emitter), file
  ``k8s.compute-domain.nvidia.com-claim_<claimUID>.json``; ``/`` in an ID becomes ``_``.
- The claim UID in every device name keeps names unique, because runtimes may cache specs.
- The base spec (``k8s.compute-domain.nvidia.com-device_base.json``, device ``all``) is written
  at every start with what the node's driver root gives a management container: device nodes,
  driver programs (``nvidia-imex``, ``nvidia-imex-ctl``), libraries, IPC sockets, firmware and
  ``NVIDIA_VISIBLE_DEVICES=void`` (``plugin.basespec``). Only daemon claims reference it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path

from compute_domains.infra import atomicfile, cdispec

CDI_VENDOR = "k8s.compute-domain.nvidia.com"
"""The CDI vendor of every spec this plugin writes."""
CLAIM_KIND = f"{CDI_VENDOR}/claim"
"""Kind of the per-claim specs."""
BASE_KIND = f"{CDI_VENDOR}/device"
"""Kind of the base spec (driver files and all NVIDIA device nodes, for daemon containers)."""
BASE_DEVICE_ID = f"{BASE_KIND}=all"
"""The base spec's one device; daemon claims list it before their own claim device."""

IMEX_CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"
"""Folder of the IMEX channel character devices."""
CHANNEL_FILE_MODE = 0o666
"""Mode of injected channel device nodes."""
CAPS_DIR = "/dev/nvidia-caps"
"""Folder of the NVIDIA capability devices (``nvidia-cap<minor>``)."""
IMEX_CONFIG_MOUNT = "/imexd"
"""Where a daemon container sees its per-ComputeDomain host folder."""
BASE_SPEC_FILE = f"{CDI_VENDOR}-device_base.json"
"""File name of the base spec inside the CDI root."""
_CLAIM_FILE_PREFIX = f"{CDI_VENDOR}-claim_"
_SUFFIX = ".json"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ClaimSpec:
    """A claim's CDI spec and the CDI IDs of its devices."""

    claim_uid: str
    """The claim this spec belongs to."""
    spec: cdispec.Spec
    """The spec to write (kind ``CLAIM_KIND``)."""
    device_ids: Mapping[str, str]
    """Allocatable device name (e.g. ``channel-0``) → its fully-qualified CDI device name."""


def channel_device_node(channel: int, *, major: int) -> cdispec.DeviceNode:
    """The char device node of IMEX channel ``channel`` (minor = channel number)."""
    return cdispec.DeviceNode(
        path=f"{IMEX_CHANNEL_DIR}/channel{channel}",
        type="c",
        major=major,
        minor=channel,
        file_mode=CHANNEL_FILE_MODE,
    )


def channel_edits(channels: Iterable[int], *, major: int) -> cdispec.ContainerEdits:
    """Edits that give a container the IMEX channels ``channels``, in the given order."""
    return cdispec.ContainerEdits(
        device_nodes=tuple(channel_device_node(c, major=major) for c in channels)
    )


def caps_device_node(*, minor: int, major: int, file_mode: int) -> cdispec.DeviceNode:
    """The capability device node ``/dev/nvidia-caps/nvidia-cap<minor>`` (e.g. fabric-imex-mgmt)."""
    return cdispec.DeviceNode(
        path=f"{CAPS_DIR}/nvidia-cap{minor}",
        type="c",
        major=major,
        minor=minor,
        file_mode=file_mode,
    )


def daemon_edits(
    *,
    clique_id: str,
    domain_uid: str,
    domain_name: str,
    domain_namespace: str,
    domain_dir: Path,
    device_nodes: Iterable[cdispec.DeviceNode] = (),
) -> cdispec.ContainerEdits:
    """Edits for a ComputeDomain daemon container: identity env, ``/imexd`` bind mount, nodes.

    Args:
        clique_id: this node's clique ID (may be empty: no MNNVL).
        domain_uid: UID of the ComputeDomain.
        domain_name: name of the ComputeDomain.
        domain_namespace: namespace of the ComputeDomain.
        domain_dir: host folder of this ComputeDomain, mounted read-write at ``/imexd``.
        device_nodes: extra nodes (the fabric-imex-mgmt capability when the clique ID is set).
    """
    return cdispec.ContainerEdits(
        env=(
            f"CLIQUE_ID={clique_id}",
            f"COMPUTE_DOMAIN_UUID={domain_uid}",
            f"COMPUTE_DOMAIN_NAME={domain_name}",
            f"COMPUTE_DOMAIN_NAMESPACE={domain_namespace}",
        ),
        device_nodes=tuple(device_nodes),
        mounts=(
            cdispec.Mount(
                host_path=str(domain_dir),
                container_path=IMEX_CONFIG_MOUNT,
                options=("rw", "nosuid", "nodev", "bind"),
            ),
        ),
    )


def claim_device_name(claim_uid: str, device: str) -> str:
    """The CDI device name for allocatable ``device`` of claim ``claim_uid``."""
    return f"{claim_uid}-{device}"


def build_claim_spec(
    claim_uid: str, edits: Mapping[str, cdispec.ContainerEdits]
) -> ClaimSpec | None:
    """The claim's CDI spec from each allocatable device's edits; None when none has edits.

    Args:
        claim_uid: the ResourceClaim UID.
        edits: allocatable device name → its container edits, in the order to list them.

    Raises:
        cdispec.CdiSpecError: a resulting CDI device name would be invalid.
    """
    devices: list[cdispec.Device] = []
    ids: dict[str, str] = {}
    for device, device_edits in edits.items():
        if device_edits.is_empty():
            continue
        name = claim_device_name(claim_uid, device)
        ids[device] = cdispec.qualified_name(CLAIM_KIND, name)
        devices.append(cdispec.Device(name=name, edits=device_edits))
    if not devices:
        return None
    draft = cdispec.Spec(version="0.3.0", kind=CLAIM_KIND, devices=tuple(devices))
    spec = dataclasses.replace(draft, version=cdispec.minimum_version(draft))
    return ClaimSpec(claim_uid=claim_uid, spec=spec, device_ids=ids)


def build_base_spec(edits: cdispec.ContainerEdits) -> cdispec.Spec:
    """The base spec: device ``all`` with the driver's edits (``plugin.basespec``)."""
    draft = cdispec.Spec(
        version="0.3.0",
        kind=BASE_KIND,
        devices=(cdispec.Device(name="all", edits=edits),),
    )
    return dataclasses.replace(draft, version=cdispec.minimum_version(draft))


def claim_spec_file_name(claim_uid: str) -> str:
    """File name of a claim's spec inside the CDI root."""
    return f"{_CLAIM_FILE_PREFIX}{claim_uid.replace('/', '_')}{_SUFFIX}"


class CdiWriter:
    """Writes and removes this plugin's claim specs in one CDI directory (blocking IO)."""

    def __init__(self, cdi_root: Path) -> None:
        """Args: cdi_root: the runtime's dynamic CDI folder (``/var/run/cdi`` in production)."""
        self._root = cdi_root

    @property
    def root(self) -> Path:
        """The CDI folder."""
        return self._root

    def claim_spec_path(self, claim_uid: str) -> Path:
        """Where the spec of claim ``claim_uid`` lives."""
        return self._root / claim_spec_file_name(claim_uid)

    def write_claim_spec(self, claim: ClaimSpec) -> Path:
        """Write (or replace) the claim's spec atomically; returns its path."""
        path = self.claim_spec_path(claim.claim_uid)
        atomicfile.write_atomic(path, cdispec.to_json(claim.spec), mode=0o644)
        return path

    def write_base_spec(self, spec: cdispec.Spec) -> Path:
        """Write (or replace) the base spec atomically; returns its path."""
        path = self._root / BASE_SPEC_FILE
        atomicfile.write_atomic(path, cdispec.to_json(spec), mode=0o644)
        return path

    def remove_claim_spec(self, claim_uid: str) -> bool:
        """Delete the claim's spec; False when it did not exist (which is also success)."""
        with contextlib.suppress(FileNotFoundError):
            self.claim_spec_path(claim_uid).unlink()
            return True
        return False

    def claim_uids(self) -> list[str]:
        """Claim UIDs (with ``/`` shown as ``_``) that have a spec file here, sorted."""
        if not self._root.is_dir():
            return []
        return sorted(
            p.name[len(_CLAIM_FILE_PREFIX) : -len(_SUFFIX)]
            for p in self._root.glob(f"{_CLAIM_FILE_PREFIX}*{_SUFFIX}")
        )
