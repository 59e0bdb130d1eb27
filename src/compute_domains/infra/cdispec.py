"""CDI (Container Device Interface) specs: typed model, strict parser, and the runtime's edit merge.

Both sides use it: the plugin builds specs from these types and serialises them with ``to_json``;
the simulated kubelet/runtime parses spec files and resolves the CDI device names the plugin
returned into one merged set of container edits, the way a container runtime does.

Invariants and rules (shared/spec/kubelet-dra-contract.md §4):
- Parsing is strict: unknown keys, bad names, an empty device, an unknown ``cdiVersion`` or a
  version lower than the fields used need are all ``CdiSpecError``.
- ``minimum_version`` gives the lowest ``cdiVersion`` that covers a spec's content; writers use
  it because older runtimes reject newer version strings.
- ``container_edits_for`` merges in request order: the first time a spec contributes, its
  spec-level edits come first, then each device's own edits. An unresolvable name fails the whole
  request and nothing is applied.
- ``intelRdt`` and ``netDevices`` are accepted when parsing (for their minimum versions) but not
  modelled; hooks are modelled and validated, and an applier may ignore them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from compute_domains.infra import errors

KNOWN_VERSIONS = (
    *("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0"),
    *("1.0.0", "1.1.0"),
)
"""``cdiVersion`` strings a runtime of CDI 1.1 accepts (with or without a leading ``v``)."""

_VENDOR_OR_CLASS = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
_HOOK_NAMES = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)


class CdiSpecError(errors.PermanentError):
    """A spec document or a CDI device name is invalid."""


class UnresolvableDevicesError(errors.PermanentError):
    """Some requested CDI device names are defined by no (or by conflicting) specs."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__(f"unresolvable CDI devices {', '.join(names)}")
        self.names = tuple(names)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DeviceNode:
    """A device node to create in the container (``deviceNodes[]``)."""

    path: str
    host_path: str | None = None
    type: str | None = None
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str | None = None
    uid: int | None = None
    gid: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Mount:
    """A mount to add to the container (``mounts[]``)."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = ()
    type: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Hook:
    """An OCI hook (``hooks[]``)."""

    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


_JSON_KEYS: dict[str, str] = {
    "host_path": "hostPath",
    "container_path": "containerPath",
    "file_mode": "fileMode",
    "hook_name": "hookName",
    "device_nodes": "deviceNodes",
    "additional_gids": "additionalGids",
}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ContainerEdits:
    """Changes a CDI device (or a whole spec) makes to a container."""

    env: tuple[str, ...] = ()
    """``NAME=VALUE`` entries; a later entry for the same name wins."""
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()
    additional_gids: tuple[int, ...] = ()

    def is_empty(self) -> bool:
        """Whether applying these edits would change nothing."""
        return not (
            self.env or self.device_nodes or self.mounts or self.hooks or self.additional_gids
        )

    def merged(self, other: ContainerEdits) -> ContainerEdits:
        """``self`` followed by ``other`` (each list concatenated)."""
        return ContainerEdits(
            env=self.env + other.env,
            device_nodes=self.device_nodes + other.device_nodes,
            mounts=self.mounts + other.mounts,
            hooks=self.hooks + other.hooks,
            additional_gids=self.additional_gids + other.additional_gids,
        )

    def env_map(self) -> dict[str, str]:
        """The env entries as a mapping, later entries replacing earlier ones."""
        return dict(entry.split("=", 1) for entry in self.env)

    def to_json(self) -> dict[str, Any]:
        """The ``containerEdits`` object (empty lists and unset fields left out)."""
        out: dict[str, Any] = _to_json(self)
        return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Device:
    """One named device of a spec."""

    name: str
    edits: ContainerEdits
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Spec:
    """One CDI spec file's content."""

    version: str
    kind: str
    devices: tuple[Device, ...]
    edits: ContainerEdits = ContainerEdits()
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    priority: int = 0
    """Index of the spec's directory in the runtime's list; a higher index wins conflicts."""

    def qualified_name(self, device: str) -> str:
        """The fully-qualified CDI name ``<vendor>/<class>=<device>``."""
        return f"{self.kind}={device}"

    def to_json(self) -> dict[str, Any]:
        """The spec document (``cdiVersion``, ``kind``, ``devices``, optional extras)."""
        doc: dict[str, Any] = {"cdiVersion": self.version, "kind": self.kind}
        if self.annotations:
            doc["annotations"] = dict(self.annotations)
        doc["devices"] = []
        for d in self.devices:
            entry: dict[str, Any] = {"name": d.name}
            if d.annotations:
                entry["annotations"] = dict(d.annotations)
            entry["containerEdits"] = d.edits.to_json()
            doc["devices"].append(entry)
        if not self.edits.is_empty():
            doc["containerEdits"] = self.edits.to_json()
        return doc


def qualified_name(kind: str, device: str) -> str:
    """``<vendor>/<class>=<device>`` after checking each part's syntax."""
    _check_kind(kind)
    if not _DEVICE_NAME.match(device):
        raise CdiSpecError(f"invalid CDI device name {device!r}")
    return f"{kind}={device}"


def minimum_version(spec: Spec, *, raw: Mapping[str, Any] | None = None) -> str:
    """The lowest ``cdiVersion`` that covers what ``spec`` uses (``raw``: unmodelled fields)."""
    need = (0, 3, 0)
    edits = [spec.edits, *(d.edits for d in spec.devices)]
    if any(m.type for e in edits for m in e.mounts):
        need = max(need, (0, 4, 0))
    if any(n.host_path for e in edits for n in e.device_nodes):
        need = max(need, (0, 5, 0))
    if any(d.name[0].isdigit() for d in spec.devices):
        need = max(need, (0, 5, 0))
    if spec.annotations or any(d.annotations for d in spec.devices):
        need = max(need, (0, 6, 0))
    if "." in spec.kind.partition("/")[2]:
        need = max(need, (0, 6, 0))
    if any(e.additional_gids for e in edits):
        need = max(need, (0, 7, 0))
    if raw is not None:
        raw_edits = [raw.get("containerEdits") or {}]
        raw_edits += [d.get("containerEdits") or {} for d in raw.get("devices", [])]
        if any("intelRdt" in e for e in raw_edits):
            need = max(need, (0, 7, 0))
        if any("netDevices" in e for e in raw_edits):
            need = max(need, (1, 1, 0))
    return ".".join(str(p) for p in need)


def parse_spec(doc: Mapping[str, Any], *, priority: int = 0) -> Spec:
    """Validate a decoded spec document and return its model.

    Raises:
        CdiSpecError: anything a CDI runtime would reject when loading the file.
    """
    try:
        _keys(doc, {"cdiVersion", "kind", "devices"}, {"annotations", "containerEdits"}, "spec")
        version = str(doc["cdiVersion"]).removeprefix("v")
        if version not in KNOWN_VERSIONS:
            raise CdiSpecError(f"invalid version {doc['cdiVersion']!r}")
        kind = _check_kind(_s(doc["kind"]))
        raw_devices = doc["devices"]
        if not isinstance(raw_devices, list) or not raw_devices:
            raise CdiSpecError("spec has no devices")
        devices = tuple(_parse_device(d) for d in raw_devices)
        names = [d.name for d in devices]
        if len(set(names)) != len(names):
            raise CdiSpecError(f"duplicate device names in {names}")
        spec = Spec(
            version=version,
            kind=kind,
            devices=devices,
            edits=_parse_edits(doc.get("containerEdits") or {}),
            annotations=_str_map(doc.get("annotations") or {}),
            priority=priority,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise CdiSpecError(f"invalid CDI spec: {type(err).__name__}: {err}") from err
    need = minimum_version(spec, raw=doc)
    if _vtuple(version) < _vtuple(need):
        raise CdiSpecError(f"the spec version must be at least v{need} (got {version})")
    return spec


def load_spec_file(path: Path, *, priority: int = 0) -> Spec:
    """Read and parse a ``.json`` or ``.yaml`` spec file (``CdiSpecError`` names the file)."""
    text = path.read_text()
    try:
        doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        if not isinstance(doc, dict):
            raise CdiSpecError("not a mapping")
        return parse_spec(doc, priority=priority)
    except (ValueError, yaml.YAMLError, CdiSpecError) as err:
        raise CdiSpecError(f"{path}: {err}") from err


def load_spec_dirs(dirs: Sequence[Path]) -> tuple[list[Spec], dict[Path, CdiSpecError]]:
    """Every valid spec in ``dirs`` (priority = directory index) and the errors of invalid files."""
    specs: list[Spec] = []
    failed: dict[Path, CdiSpecError] = {}
    for priority, folder in enumerate(dirs):
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix not in (".json", ".yaml") or not path.is_file():
                continue
            try:
                specs.append(load_spec_file(path, priority=priority))
            except CdiSpecError as err:  # a bad file is skipped, as runtimes do; reported back
                failed[path] = err
    return specs, failed


def container_edits_for(device_ids: Sequence[str], specs: Iterable[Spec]) -> ContainerEdits:
    """Merge the edits for ``device_ids`` in request order, as a runtime injects CDI devices.

    A name defined at the same priority by two specs is a conflict and counts as unresolvable;
    at different priorities the higher one wins.

    Raises:
        UnresolvableDevicesError: some names are unknown or in conflict; nothing is returned.
    """
    index: dict[str, tuple[Spec, Device]] = {}
    conflicts: set[str] = set()
    for spec in specs:
        for device in spec.devices:
            name = spec.qualified_name(device.name)
            held = index.get(name)
            if held is None or held[0].priority < spec.priority:
                index[name] = (spec, device)
                conflicts.discard(name)
            elif held[0].priority == spec.priority:
                conflicts.add(name)
    missing = [n for n in device_ids if n not in index or n in conflicts]
    if missing:
        raise UnresolvableDevicesError(missing)
    merged = ContainerEdits()
    contributed: list[Spec] = []
    for name in device_ids:
        spec, device = index[name]
        if not any(s is spec for s in contributed):
            contributed.append(spec)
            merged = merged.merged(spec.edits)
        merged = merged.merged(device.edits)
    return merged


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ContainerConfig:
    """The parts of a container's config that CDI edits change (hooks are not modelled)."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    additional_gids: tuple[int, ...] = ()


def apply_edits(edits: ContainerEdits, base: ContainerConfig | None = None) -> ContainerConfig:
    """Apply merged ``edits`` to ``base`` the way a runtime does; hooks are ignored.

    env: an existing ``NAME`` is replaced in place, otherwise appended. Device nodes: ``hostPath``
    defaults to ``path``; a node at the same container path is replaced. Mounts: one at the same
    ``containerPath`` is replaced, then all are stably sorted parents-first by path depth. Host
    device nodes are not inspected: a node without type/major is passed on as it is.
    """
    base = base or ContainerConfig()
    env = list(base.env)
    for entry in edits.env:
        name = entry.split("=", 1)[0]
        at = next((i for i, e in enumerate(env) if e.split("=", 1)[0] == name), None)
        if at is None:
            env.append(entry)
        else:
            env[at] = entry
    nodes = list(base.device_nodes)
    for node in edits.device_nodes:
        _replace_or_append(nodes, dataclasses.replace(node, host_path=node.host_path or node.path))
    mounts = list(base.mounts)
    for mount in edits.mounts:
        _replace_or_append(mounts, mount)
    mounts.sort(key=lambda m: len(Path(m.container_path).parts))
    gids = base.additional_gids + tuple(g for g in edits.additional_gids if g)
    return ContainerConfig(
        env=tuple(env), device_nodes=tuple(nodes), mounts=tuple(mounts), additional_gids=gids
    )


def _replace_or_append(items: list[Any], new: DeviceNode | Mount) -> None:
    def key(item: DeviceNode | Mount) -> str:
        return item.path if isinstance(item, DeviceNode) else item.container_path

    at = next((i for i, old in enumerate(items) if key(old) == key(new)), None)
    if at is None:
        items.append(new)
    else:
        items[at] = new


def _parse_device(raw: object) -> Device:
    obj = _m(raw)
    _keys(obj, {"name", "containerEdits"}, {"annotations"}, "device")
    name = _s(obj["name"])
    if not _DEVICE_NAME.match(name):
        raise CdiSpecError(f"invalid device name {name!r}")
    edits = _parse_edits(obj["containerEdits"])
    if edits.is_empty():
        raise CdiSpecError(f"device {name!r} has no container edits")
    return Device(name=name, edits=edits, annotations=_str_map(obj.get("annotations") or {}))


def _parse_edits(raw: object) -> ContainerEdits:
    obj = _m(raw)
    known = {"env", "deviceNodes", "mounts", "hooks", "additionalGids", "intelRdt", "netDevices"}
    _keys(obj, set(), known, "containerEdits")
    env = tuple(_s(e) for e in obj.get("env") or [])
    for entry in env:
        if entry.partition("=")[0] == "" or "=" not in entry:
            raise CdiSpecError(f"invalid env entry {entry!r}")
    return ContainerEdits(
        env=env,
        device_nodes=tuple(_parse_node(n) for n in obj.get("deviceNodes") or []),
        mounts=tuple(_parse_mount(m) for m in obj.get("mounts") or []),
        hooks=tuple(_parse_hook(h) for h in obj.get("hooks") or []),
        additional_gids=tuple(int(g) for g in obj.get("additionalGids") or [] if int(g) != 0),
    )


def _parse_node(raw: object) -> DeviceNode:
    obj = _m(raw)
    opt = {"hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
    _keys(obj, {"path"}, opt, "deviceNode")
    node = DeviceNode(**{_py(k): v for k, v in obj.items()})
    for text in (node.path, node.host_path, node.type, node.permissions):
        if text is not None:
            _s(text)
    if not node.path:
        raise CdiSpecError("device node without a path")
    if node.type not in (None, "", "b", "c", "u", "p"):
        raise CdiSpecError(f"device node {node.path}: invalid type {node.type!r}")
    if node.permissions and set(node.permissions) - set("rwm"):
        raise CdiSpecError(f"device node {node.path}: invalid permissions {node.permissions!r}")
    for value in (node.major, node.minor, node.file_mode, node.uid, node.gid):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise CdiSpecError(f"device node {node.path}: non-integer number {value!r}")
    return node


def _parse_mount(raw: object) -> Mount:
    obj = _m(raw)
    _keys(obj, {"hostPath", "containerPath"}, {"options", "type"}, "mount")
    return Mount(
        host_path=_s(obj["hostPath"]),
        container_path=_s(obj["containerPath"]),
        options=tuple(_s(o) for o in obj.get("options") or []),
        type=_s(obj["type"]) if obj.get("type") else None,
    )


def _parse_hook(raw: object) -> Hook:
    obj = _m(raw)
    _keys(obj, {"hookName", "path"}, {"args", "env", "timeout"}, "hook")
    hook = Hook(
        hook_name=_s(obj["hookName"]),
        path=_s(obj["path"]),
        args=tuple(_s(a) for a in obj.get("args") or []),
        env=tuple(_s(e) for e in obj.get("env") or []),
        timeout=int(obj["timeout"]) if obj.get("timeout") is not None else None,
    )
    if hook.hook_name not in _HOOK_NAMES:
        raise CdiSpecError(f"invalid hook name {hook.hook_name!r}")
    if not hook.path.startswith("/") or (hook.timeout is not None and hook.timeout <= 0):
        raise CdiSpecError(f"invalid hook {hook.hook_name}: path {hook.path!r}")
    return hook


def _check_kind(kind: str) -> str:
    vendor, slash, cls = kind.partition("/")
    if not slash or not _VENDOR_OR_CLASS.match(vendor) or not _VENDOR_OR_CLASS.match(cls):
        raise CdiSpecError(f"invalid CDI kind {kind!r} (want <vendor>/<class>)")
    return kind


def _to_json(value: object) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is None or item == ():
                continue
            out[_JSON_KEYS.get(f.name, f.name)] = _to_json(item)
        return out
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    return value


def _py(key: str) -> str:
    reverse = {v: k for k, v in _JSON_KEYS.items()}
    return reverse.get(key, key)


def _keys(obj: Mapping[str, Any], required: set[str], optional: set[str], what: str) -> None:
    missing = required - set(obj)
    unknown = set(obj) - required - optional
    if missing or unknown:
        raise CdiSpecError(f"{what}: missing {sorted(missing)}, unknown fields {sorted(unknown)}")


def _vtuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _m(raw: object) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise CdiSpecError(f"expected a mapping, got {type(raw).__name__}")
    return raw


def _s(raw: object) -> str:
    if not isinstance(raw, str):
        raise CdiSpecError(f"expected a string, got {raw!r}")
    return raw


def _str_map(raw: object) -> dict[str, str]:
    return {_s(k): _s(v) for k, v in _m(raw).items()}
