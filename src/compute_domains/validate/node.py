"""``validate node``: what the kubelet plugin would publish on this node, read by its own code.

Discovery runs twice through ``plugin.discovery.NvmlDiscovery``: leniently (non-strict fabric
mode) to show every GPU whatever its fabric state, and strictly, as the plugin starts, to tell
whether the plugin would start here. Host facts (``host``) add what discovery does not look at:
a host ``nvidia-imex`` service (it must be off: ComputeDomains run one IMEX daemon per domain
in a pod), the driver's IMEX parameters, and what the plugin's base CDI spec would mount into
IMEX daemon containers from the driver root (``plugin.basespec``): the daemon's ``nvidia-imex``
comes only from there. ``build_report`` is pure.

Size: about 310 lines for one command; its facts, report and checks are read together, and the
checks (its verdict) follow the report's sections one for one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from compute_domains.plugin import basespec, cdi, discovery, fabricinfo, nodeinfo
from compute_domains.validate import host, report
from compute_domains.validate.report import Check, Status

_NO_CLIQUE = "(empty: fabric-attached or PCIe, not in a multi-node NVLink domain)"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NodeSettings:
    """Where the node facts are read (defaults: the real host)."""

    proc_devices: Path = discovery.PROC_DEVICES
    """The kernel's device-major table."""
    channel_dir: Path = Path(cdi.IMEX_CHANNEL_DIR)
    """The host's IMEX channel folder (normally absent)."""
    driver_params: Path = host.DRIVER_PARAMS
    """The NVIDIA module's parameter file."""
    bin_dirs: tuple[str, ...] = host.BIN_DIRS
    """Folders searched for a host ``nvidia-imex``."""
    unit_dirs: tuple[str, ...] = host.UNIT_DIRS
    """Folders searched for ``nvidia-imex.service``."""
    proc_root: Path = Path("/proc")
    """Where running processes are listed."""
    driver_root: Path = Path("/")
    """The NVIDIA driver installation (the chart's ``nvidiaDriverRoot``)."""
    host_dev: Path = Path("/")
    """Where the host's ``/dev`` is (device nodes when the driver root has none)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NodeFacts:
    """Everything ``build_report`` needs (gathered by ``gather``)."""

    node: nodeinfo.NodeInfo
    strict_error: str
    """The strict discovery's error ("" when the plugin would start)."""
    imex: host.ImexPresence
    params: dict[str, str]
    host_channels: tuple[str, ...]
    driver_root: Path = Path("/")
    driver_files: basespec.DriverFiles | None = None
    """What the base CDI spec would mount (None: not looked at)."""


def gather(settings: NodeSettings, *, nvml: Any | None = None) -> NodeFacts:
    """Read the node (blocking).

    Raises:
        report.NoGpuError: there is no GPU here.
        nodeinfo.DiscoveryError: even lenient discovery failed (e.g. GPUs disagree on cliques).
    """
    host.require_gpus(nvml)
    lenient = discovery.NvmlDiscovery(
        proc_devices=settings.proc_devices, strict_fabric=False, nvml=nvml
    ).discover()
    strict_error = ""
    try:
        discovery.NvmlDiscovery(proc_devices=settings.proc_devices, nvml=nvml).discover()
    except nodeinfo.DiscoveryError as err:
        strict_error = str(err)
    return NodeFacts(
        node=lenient,
        strict_error=strict_error,
        imex=host.find_imex(
            bin_dirs=settings.bin_dirs, unit_dirs=settings.unit_dirs, proc_root=settings.proc_root
        ),
        params=host.driver_params(settings.driver_params),
        host_channels=host.channel_nodes(settings.channel_dir),
        driver_root=settings.driver_root,
        driver_files=basespec.discover(
            settings.driver_root, lenient.driver_version, host_dev=settings.host_dev
        ),
    )


def build_report(facts: NodeFacts) -> report.Report:
    """The node report: facts, the GPU table, checks and (via checks) the verdict."""
    node = facts.node
    gpus = report.Table(
        title="GPUs",
        columns=("idx", "name", "uuid", "pci bus", "fabric", "cluster uuid", "clique"),
        rows=tuple(
            (
                str(g.index),
                g.name,
                g.uuid,
                g.pci_bus_id,
                _state(g.fabric_state),
                g.cluster_uuid or "-",
                "-" if g.clique is None else str(g.clique),
            )
            for g in node.gpus
        ),
    )
    facts_lines = (
        ("driver version", node.driver_version),
        ("NVML binding", node.binding.version if node.binding else "?"),
        ("GPUs", str(len(node.gpus))),
        ("clique id", node.clique_id or _NO_CLIQUE),
        ("imex channel major", _opt(node.channel_major)),
        ("nvidia-caps major", _opt(node.caps_major)),
        ("ImexChannelCount", facts.params.get("ImexChannelCount", "?")),
        ("CreateImexChannel0", facts.params.get("CreateImexChannel0", "?")),
        ("host channel nodes", ", ".join(facts.host_channels) or "none"),
        ("host nvidia-imex", _imex_text(facts.imex)),
    )
    data = {
        "driver_version": node.driver_version,
        "nvml_binding": _binding_data(node.binding),
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "uuid": g.uuid,
                "pci_bus_id": g.pci_bus_id,
                "fabric_state": _state(g.fabric_state),
                "cluster_uuid": g.cluster_uuid,
                "clique": g.clique,
            }
            for g in node.gpus
        ],
        "clique_id": node.clique_id,
        "channel_major": node.channel_major,
        "caps_major": node.caps_major,
        "driver_params": {
            k: facts.params[k]
            for k in ("ImexChannelCount", "CreateImexChannel0")
            if k in facts.params
        },
        "host_channel_nodes": list(facts.host_channels),
        "host_imex": dataclasses.asdict(facts.imex),
        "strict_discovery_error": facts.strict_error,
    }
    tables = [gpus]
    if facts.driver_files is not None:
        tables.append(_base_spec_table(facts.driver_files, facts.driver_root))
        data["base_cdi_spec"] = {
            "driver_root": str(facts.driver_root),
            **dataclasses.asdict(facts.driver_files),
            "missing_imex": list(facts.driver_files.missing_imex()),
        }
    return report.Report(
        command="node", facts=facts_lines, tables=tuple(tables), checks=checks(facts), data=data
    )


def _base_spec_table(files: basespec.DriverFiles, root: Path) -> report.Table:
    """What the base CDI spec would give an IMEX daemon container, and what is missing."""
    rows: list[tuple[str, ...]] = []
    for kind, found in (
        ("program", files.binaries),
        ("library", files.libraries),
        ("socket", files.sockets),
        ("firmware", files.firmware),
    ):
        rows.extend((kind, "/" + rel, str(root / rel)) for rel in found)
    dev_root = root if files.dev_root == "driver" else Path("/")
    rows.extend(("device", "/" + rel, str(dev_root / rel)) for rel in files.devices)
    rows.extend(
        ("MISSING", f"/usr/bin/{name}", "not in the driver root") for name in files.missing_imex()
    )
    return report.Table(
        title=f"base CDI spec for IMEX daemons (driver root {root})",
        columns=("kind", "container path", "host path"),
        rows=tuple(rows),
    )


def checks(facts: NodeFacts) -> tuple[Check, ...]:
    """The node checks, in display order."""
    node = facts.node
    out = [
        Check(name="gpus", status=Status.PASS, detail=f"{len(node.gpus)} GPU(s) visible to NVML"),
        _binding_check(node.binding),
        _strict_check(facts.strict_error),
        _fabric_check(node.gpus),
    ]
    if node.clique_id:
        out.append(
            Check(
                name="clique",
                status=Status.PASS,
                detail=f"MNNVL clique {node.clique_id}: channel claims get device nodes",
            )
        )
    else:
        out.append(
            Check(
                name="clique",
                status=Status.INFO,
                detail="empty: no multi-node NVLink domain; the plugin injects no channel "
                "device nodes here (channel claims prepare with no edits)",
            )
        )
    needed = Status.FAIL if node.clique_id else Status.WARN
    for name, major, dev in (
        ("imex channel major", node.channel_major, discovery.IMEX_CHANNELS_DEVICE),
        ("nvidia-caps major", node.caps_major, discovery.CAPS_DEVICE),
    ):
        if major is not None:
            out.append(Check(name=name, status=Status.PASS, detail=f"{dev} is char major {major}"))
        else:
            out.append(Check(name=name, status=needed, detail=f"{dev} not in /proc/devices"))
    out.append(_imex_check(facts.imex))
    if facts.driver_files is not None:
        out.append(_driver_imex_check(facts.driver_files, facts.driver_root, bool(node.clique_id)))
    return tuple(out)


def _driver_imex_check(files: basespec.DriverFiles, root: Path, mnnvl: bool) -> Check:
    missing = files.missing_imex()
    if not missing:
        return Check(
            name="driver IMEX programs",
            status=Status.PASS,
            detail=f"nvidia-imex and nvidia-imex-ctl found under {root}: the plugin's base CDI "
            "spec mounts them into ComputeDomain daemon containers",
        )
    text = " and ".join(missing)
    if mnnvl:
        return Check(
            name="driver IMEX programs",
            status=Status.FAIL,
            detail=f"{text} not found under driver root {root}: ComputeDomain daemons on this "
            "MNNVL node cannot start IMEX; install the driver's IMEX package or point "
            "nvidiaDriverRoot at the driver installation",
        )
    return Check(
        name="driver IMEX programs",
        status=Status.INFO,
        detail=f"{text} not installed under driver root {root}; expected on a node without "
        "multi-node NVLink (no IMEX domain to join); a GB200 node needs them",
    )


def _binding_data(check: fabricinfo.BindingCheck | None) -> dict[str, object] | None:
    return None if check is None else dataclasses.asdict(check)


def _binding_check(check: fabricinfo.BindingCheck | None) -> Check:
    # Discovery refuses a binding it cannot use, so one that got here reads the C layout; its
    # own, unused declarations are named so an operator knows what other tools on it may read.
    if check is None:
        return Check(name="NVML binding", status=Status.WARN, detail="not checked")
    return Check(name="NVML binding", status=Status.PASS, detail=check.summary())


def _strict_check(error: str) -> Check:
    if error:
        return Check(name="plugin discovery", status=Status.FAIL, detail=error)
    return Check(
        name="plugin discovery",
        status=Status.PASS,
        detail="the plugin's discovery (strict fabric mode) succeeds: the plugin would start",
    )


def _fabric_check(gpus: tuple[nodeinfo.GpuInfo, ...]) -> Check:
    states = {g.fabric_state for g in gpus}
    if states == {nodeinfo.FabricState.COMPLETED}:
        return Check(
            name="fabric", status=Status.PASS, detail="NVLink fabric registration completed"
        )
    if states <= {None, nodeinfo.FabricState.NOT_SUPPORTED}:
        return Check(
            name="fabric",
            status=Status.INFO,
            detail="NVML reports no GPU fabric (NOT_SUPPORTED): no NVSwitch fabric registration "
            "is visible here, so these GPUs contribute no clique (single-node NVLink may still "
            "exist: see nvidia-smi topo -m)",
        )
    shown = ", ".join(f"GPU {g.index}: {_state(g.fabric_state)}" for g in gpus)
    return Check(name="fabric", status=Status.WARN, detail=f"fabric not ready everywhere: {shown}")


def _imex_check(imex: host.ImexPresence) -> Check:
    if imex.running_pids:
        return Check(
            name="host nvidia-imex",
            status=Status.FAIL,
            detail=f"running (pids {', '.join(map(str, imex.running_pids))}): stop and disable "
            "it; ComputeDomains run their own IMEX daemon per domain",
        )
    if imex.units:
        return Check(
            name="host nvidia-imex",
            status=Status.WARN,
            detail=f"service installed but not running ({_imex_text(imex)}): keep it disabled",
        )
    if imex.present:
        return Check(
            name="host nvidia-imex",
            status=Status.PASS,
            detail="installed, no host service: ComputeDomain daemons run it in their pods",
        )
    return Check(name="host nvidia-imex", status=Status.PASS, detail="no host service, as required")


def _imex_text(imex: host.ImexPresence) -> str:
    if not imex.present:
        return "absent"
    parts = [*imex.binaries, *imex.units]
    if imex.running_pids:
        parts.append(f"running pids {', '.join(map(str, imex.running_pids))}")
    return "; ".join(parts)


def _state(state: nodeinfo.FabricState | None) -> str:
    return "n/a" if state is None else state.name


def _opt(value: int | None) -> str:
    return "absent" if value is None else str(value)
