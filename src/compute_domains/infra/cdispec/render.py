"""Write the model back as a CDI spec document (a dict), as JSON text or as YAML text.

Invariants: ``parse.parse_spec(spec_document(s))`` gives ``s`` back (priority aside); unset
fields and empty lists are left out, as the CDI library's writer leaves out Go zero values;
key order is the spec's (``cdiVersion``, ``kind``, ``annotations``, ``devices``,
``containerEdits``) so files diff cleanly. YAML output starts with ``---`` like the library's.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import yaml

from compute_domains.infra.cdispec import model

_JSON_KEYS: dict[str, str] = {
    "host_path": "hostPath",
    "container_path": "containerPath",
    "file_mode": "fileMode",
    "hook_name": "hookName",
    "device_nodes": "deviceNodes",
    "additional_gids": "additionalGids",
}


def edits_document(edits: model.ContainerEdits) -> dict[str, Any]:
    """The ``containerEdits`` object (empty lists and unset fields left out)."""
    out: dict[str, Any] = _doc(edits)
    return out


def spec_document(spec: model.Spec) -> dict[str, Any]:
    """The spec document (``cdiVersion``, ``kind``, ``devices``, optional extras)."""
    doc: dict[str, Any] = {"cdiVersion": spec.version, "kind": spec.kind}
    if spec.annotations:
        doc["annotations"] = dict(spec.annotations)
    doc["devices"] = []
    for d in spec.devices:
        entry: dict[str, Any] = {"name": d.name}
        if d.annotations:
            entry["annotations"] = dict(d.annotations)
        entry["containerEdits"] = edits_document(d.edits)
        doc["devices"].append(entry)
    if not spec.edits.is_empty():
        doc["containerEdits"] = edits_document(spec.edits)
    return doc


def to_json(spec: model.Spec) -> str:
    """The spec as indented JSON text with a final newline."""
    return json.dumps(spec_document(spec), indent=2) + "\n"


def to_yaml(spec: model.Spec) -> str:
    """The spec as YAML text, opening with ``---`` as the CDI library writes it."""
    body = yaml.safe_dump(spec_document(spec), sort_keys=False, default_flow_style=False)
    return "---\n" + body


def _doc(value: object) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is None or item == ():
                continue
            out[_JSON_KEYS.get(f.name, f.name)] = _doc(item)
        return out
    if isinstance(value, tuple):
        return [_doc(v) for v in value]
    return value
