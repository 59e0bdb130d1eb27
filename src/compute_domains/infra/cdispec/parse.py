"""Read CDI spec documents and spec folders into the model, strictly, as a runtime loads them.

Invariants (CDI library ``pkg/cdi/spec.go``, ``container-edits.go``, ``spec-dirs.go``):
- Strict: unknown keys, a missing required key, a bad name (``names``), an unknown ``cdiVersion``
  or one lower than the fields used need, a device without edits, an env entry without
  ``NAME=``, a device node type or permission outside the spec's sets, an unknown hook name or a
  relative hook path are all ``CdiSpecError``; nothing half-parsed is returned.
- JSON and YAML documents parse to the same model; files ending ``.json`` or ``.yaml`` are read,
  either holding either format (the library parses every file as YAML).
- ``load_spec_dirs`` skips a bad file and reports it, as a runtime's cache does; a missing
  folder is simply empty; sub-folders are not scanned. A spec's priority is its folder's index.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from compute_domains.infra.cdispec import model, names

HOOK_NAMES = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
"""Hook names the CDI library accepts."""
DEVICE_TYPES = frozenset({"", "b", "c", "u", "p"})
"""Device node types the CDI library accepts ("" = take it from the host node)."""
_NODE_KEYS = {
    "hostPath": "host_path",
    "type": "type",
    "major": "major",
    "minor": "minor",
    "fileMode": "file_mode",
    "permissions": "permissions",
    "uid": "uid",
    "gid": "gid",
}


def parse_spec(doc: Mapping[str, Any], *, priority: int = 0) -> model.Spec:
    """Validate a decoded spec document and return its model.

    Raises:
        CdiSpecError: anything a CDI runtime would reject when loading the file.
    """
    try:
        _keys(doc, {"cdiVersion", "kind", "devices"}, {"annotations", "containerEdits"}, "spec")
        version = names.check_version(str(doc["cdiVersion"]))
        kind = names.check_kind(_s(doc["kind"]))
        raw_devices = doc["devices"]
        if not isinstance(raw_devices, list) or not raw_devices:
            raise model.CdiSpecError("spec has no devices")
        devices = tuple(_parse_device(d) for d in raw_devices)
        device_names = [d.name for d in devices]
        if len(set(device_names)) != len(device_names):
            raise model.CdiSpecError(f"duplicate device names in {device_names}")
        spec = model.Spec(
            version=version,
            kind=kind,
            devices=devices,
            edits=_parse_edits(doc.get("containerEdits") or {}),
            annotations=_str_map(doc.get("annotations") or {}),
            priority=priority,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise model.CdiSpecError(f"invalid CDI spec: {type(err).__name__}: {err}") from err
    need = names.minimum_version(spec, raw=doc)
    if names.version_tuple(version) < names.version_tuple(need):
        raise model.CdiSpecError(f"the spec version must be at least v{need} (got {version})")
    return spec


def load_spec_file(path: Path, *, priority: int = 0) -> model.Spec:
    """Read and parse a ``.json`` or ``.yaml`` spec file (``CdiSpecError`` names the file).

    The library reads every spec file as YAML (a superset of JSON) whatever its extension, so a
    ``.json`` file holding YAML loads too; JSON is tried first only because it is faster.
    """
    text = path.read_text()
    try:
        try:
            doc = json.loads(text)
        except ValueError:
            doc = yaml.safe_load(text)
        if not isinstance(doc, dict):
            raise model.CdiSpecError("not a mapping")
        return parse_spec(doc, priority=priority)
    except (ValueError, yaml.YAMLError, model.CdiSpecError) as err:
        raise model.CdiSpecError(f"{path}: {err}") from err


def load_spec_dirs(
    dirs: Sequence[Path],
) -> tuple[list[model.Spec], dict[Path, model.CdiSpecError]]:
    """Every valid spec in ``dirs`` (priority = directory index) and the errors of invalid files."""
    specs: list[model.Spec] = []
    failed: dict[Path, model.CdiSpecError] = {}
    for priority, folder in enumerate(dirs):
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix not in (".json", ".yaml") or not path.is_file():
                continue
            try:
                specs.append(load_spec_file(path, priority=priority))
            except model.CdiSpecError as err:  # a bad file is skipped, as runtimes do; reported
                failed[path] = err
    return specs, failed


def _parse_device(raw: object) -> model.Device:
    obj = _m(raw)
    _keys(obj, {"name", "containerEdits"}, {"annotations"}, "device")
    name = _s(obj["name"])
    try:
        names.check_device_name(name)
    except model.CdiSpecError as err:
        raise model.CdiSpecError(f"invalid device name {name!r}") from err
    edits = _parse_edits(obj["containerEdits"])
    raw = _m(obj["containerEdits"])
    # Unmodelled edits still make a device non-empty (the library's ``isEmpty``).
    unmodelled = raw.get("intelRdt") is not None or bool(raw.get("netDevices"))
    if edits.is_empty() and not unmodelled:
        raise model.CdiSpecError(f"device {name!r} has no container edits")
    return model.Device(name=name, edits=edits, annotations=_str_map(obj.get("annotations") or {}))


def _parse_edits(raw: object) -> model.ContainerEdits:
    obj = _m(raw)
    known = {"env", "deviceNodes", "mounts", "hooks", "additionalGids", "intelRdt", "netDevices"}
    _keys(obj, set(), known, "containerEdits")
    return model.ContainerEdits(
        env=_env(obj.get("env") or [], "env"),
        device_nodes=tuple(_parse_node(n) for n in obj.get("deviceNodes") or []),
        mounts=tuple(_parse_mount(m) for m in obj.get("mounts") or []),
        hooks=tuple(_parse_hook(h) for h in obj.get("hooks") or []),
        # A zero GID is ignored by every runtime; dropping it here keeps the model minimal.
        additional_gids=tuple(int(g) for g in obj.get("additionalGids") or [] if int(g) != 0),
    )


def _env(raw: object, what: str) -> tuple[str, ...]:
    if not isinstance(raw, list):
        raise model.CdiSpecError(f"{what}: expected a list")
    env = tuple(_s(e) for e in raw)
    for entry in env:
        if entry.find("=") <= 0:  # the library's ValidateEnv: a name, then '='
            raise model.CdiSpecError(f"invalid env entry {entry!r} in {what}")
    return env


def _parse_node(raw: object) -> model.DeviceNode:
    obj = _m(raw)
    _keys(obj, {"path"}, set(_NODE_KEYS), "deviceNode")
    node = model.DeviceNode(
        path=_s(obj["path"]), **{_NODE_KEYS[k]: obj[k] for k in obj if k != "path"}
    )
    for text in (node.host_path, node.type, node.permissions):
        if text is not None:
            _s(text)
    if not node.path:
        raise model.CdiSpecError("device node without a path")
    if (node.type or "") not in DEVICE_TYPES:
        raise model.CdiSpecError(f"device node {node.path}: invalid type {node.type!r}")
    if node.permissions and set(node.permissions) - set("rwm"):
        raise model.CdiSpecError(
            f"device node {node.path}: invalid permissions {node.permissions!r}"
        )
    for value in (node.major, node.minor, node.file_mode, node.uid, node.gid):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise model.CdiSpecError(f"device node {node.path}: non-integer number {value!r}")
    return node


def _parse_mount(raw: object) -> model.Mount:
    obj = _m(raw)
    _keys(obj, {"hostPath", "containerPath"}, {"options", "type"}, "mount")
    mount = model.Mount(
        host_path=_s(obj["hostPath"]),
        container_path=_s(obj["containerPath"]),
        options=tuple(_s(o) for o in obj.get("options") or []),
        type=_s(obj["type"]) if obj.get("type") else None,
    )
    if not mount.host_path or not mount.container_path:
        raise model.CdiSpecError(f"invalid mount {mount.host_path!r} → {mount.container_path!r}")
    return mount


def _parse_hook(raw: object) -> model.Hook:
    obj = _m(raw)
    _keys(obj, {"hookName", "path"}, {"args", "env", "timeout"}, "hook")
    hook = model.Hook(
        hook_name=_s(obj["hookName"]),
        path=_s(obj["path"]),
        args=tuple(_s(a) for a in obj.get("args") or []),
        env=_env(obj.get("env") or [], "hook env"),
        timeout=int(obj["timeout"]) if obj.get("timeout") is not None else None,
    )
    if hook.hook_name not in HOOK_NAMES:
        raise model.CdiSpecError(f"invalid hook name {hook.hook_name!r}")
    if not hook.path.startswith("/") or (hook.timeout is not None and hook.timeout <= 0):
        raise model.CdiSpecError(f"invalid hook {hook.hook_name}: path {hook.path!r}")
    return hook


def _keys(obj: Mapping[str, Any], required: set[str], optional: set[str], what: str) -> None:
    missing = required - set(obj)
    unknown = set(obj) - required - optional
    if missing or unknown:
        raise model.CdiSpecError(
            f"{what}: missing {sorted(missing)}, unknown fields {sorted(unknown)}"
        )


def _m(raw: object) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise model.CdiSpecError(f"expected a mapping, got {type(raw).__name__}")
    return raw


def _s(raw: object) -> str:
    if not isinstance(raw, str):
        raise model.CdiSpecError(f"expected a string, got {raw!r}")
    return raw


def _str_map(raw: object) -> dict[str, str]:
    return {_s(k): _s(v) for k, v in _m(raw).items()}
