"""CDI device names → the merged container edits, as the CDI library's cache resolves them.

Rules (library ``Cache.refresh`` and ``Cache.InjectDevices``):
- A name defined in folders of different priority resolves to the higher one; defined twice at
  one priority it is a conflict and resolves to nothing, even when a higher folder defines it
  too (the library records the conflict while scanning folders lowest first and never clears
  it); the files themselves stay loaded for their other devices.
- Edits merge in request order: the first time a spec contributes a device, that spec's
  spec-level edits come first, then the device's own. A spec contributes its spec-level edits
  once, however many of its devices are requested.
- Any unresolvable name fails the whole request with ``UnresolvableDevicesError`` naming the
  unresolvable names only; nothing is returned.
- Merging only concatenates; what a repeated env name, device path or mount path means is
  decided when the edits are applied (``apply``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from compute_domains.infra.cdispec import model


def index(specs: Iterable[model.Spec]) -> dict[str, tuple[model.Spec, model.Device]]:
    """Qualified name → (spec, device) for every resolvable device of ``specs``."""
    found: dict[str, tuple[model.Spec, model.Device]] = {}
    conflicts: set[str] = set()
    # Scan lowest priority first, as the library walks its folders (a stable sort keeps the
    # file order inside one folder).
    for spec in sorted(specs, key=lambda s: s.priority):
        for device in spec.devices:
            name = spec.qualified_name(device.name)
            held = found.get(name)
            if held is None or held[0].priority < spec.priority:
                found[name] = (spec, device)
            elif held[0].priority == spec.priority:
                conflicts.add(name)
    for name in conflicts:
        found.pop(name)
    return found


def container_edits_for(
    device_ids: Sequence[str], specs: Iterable[model.Spec]
) -> model.ContainerEdits:
    """Merge the edits for ``device_ids`` in request order, as the CDI library does.

    Raises:
        UnresolvableDevicesError: some names are unknown or in conflict; nothing is returned.
    """
    known = index(specs)
    missing = [n for n in device_ids if n not in known]
    if missing:
        raise model.UnresolvableDevicesError(missing)
    merged = model.ContainerEdits()
    contributed: list[model.Spec] = []
    for name in device_ids:
        spec, device = known[name]
        if not any(s is spec for s in contributed):
            contributed.append(spec)
            merged = merged.merged(spec.edits)
        merged = merged.merged(device.edits)
    return merged
