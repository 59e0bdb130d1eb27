"""CDI (Container Device Interface): the one implementation of specs and of applying them.

Writers (the plugin) build specs from ``model`` types and write them with ``render``; readers
(the simulated runtime, ``validate``) load spec folders with ``parse`` and inject device names
into a container with ``apply.inject``, which resolves them (``resolve``) and applies the merged
edits by the CDI library's rules. A spec written by NVIDIA's driver (YAML, spec-level mounts,
env and hooks, device nodes by ``path``/``hostPath`` only) and one written by ours (JSON,
complete device nodes) go through the same steps.

Jobs, one module each:
- ``model``: typed spec data and the errors of the CDI steps;
- ``names``: kind, device-name and version rules, ``minimum_version``;
- ``parse``: strict loading of documents, files and spec folders;
- ``render``: documents, JSON and YAML text;
- ``resolve``: device names → merged edits (priorities, conflicts, spec-level edits once);
- ``apply``: merged edits → a container's config (env, device nodes, mounts, hooks, GIDs).

This package's public surface is re-exported here so that callers write ``cdispec.Spec``,
``cdispec.inject``; anything not listed is internal. The rules are cited from
shared/spec/kubelet-dra-contract.md §4 and the CDI library (v1.1.0) in each module.
"""

from compute_domains.infra.cdispec.apply import (
    Host,
    OciConfig,
    RootedHost,
    apply_edits,
    complete_node,
    inject,
)
from compute_domains.infra.cdispec.model import (
    CdiSpecError,
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    InjectionError,
    Mount,
    Spec,
    UnresolvableDevicesError,
)
from compute_domains.infra.cdispec.names import (
    KNOWN_VERSIONS,
    check_kind,
    minimum_version,
    qualified_name,
)
from compute_domains.infra.cdispec.parse import load_spec_dirs, load_spec_file, parse_spec
from compute_domains.infra.cdispec.render import (
    edits_document,
    spec_document,
    to_json,
    to_yaml,
)
from compute_domains.infra.cdispec.resolve import container_edits_for

__all__ = [
    "KNOWN_VERSIONS",
    "CdiSpecError",
    "ContainerEdits",
    "Device",
    "DeviceNode",
    "Hook",
    "Host",
    "InjectionError",
    "Mount",
    "OciConfig",
    "RootedHost",
    "Spec",
    "UnresolvableDevicesError",
    "apply_edits",
    "check_kind",
    "complete_node",
    "container_edits_for",
    "edits_document",
    "inject",
    "load_spec_dirs",
    "load_spec_file",
    "minimum_version",
    "parse_spec",
    "qualified_name",
    "spec_document",
    "to_json",
    "to_yaml",
]
