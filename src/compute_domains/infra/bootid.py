"""Read the node's kernel boot ID, the value that changes on every boot.

The plugin stamps its checkpoint with it: a checkpoint from an earlier boot describes devices and
mounts that no longer exist, so it is discarded. Invariant: the returned ID is the file's content
with surrounding whitespace removed and is never empty.
"""

from __future__ import annotations

from pathlib import Path

from compute_domains.infra import errors

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
"""Where Linux publishes the boot ID; tests and the simulator pass their own path."""


def read_boot_id(path: Path = BOOT_ID_PATH) -> str:
    """The boot ID stored at ``path``, trimmed.

    Args:
        path: the boot-ID file; the kernel's by default.

    Returns:
        The boot ID, for example ``6f1f6f3e-8a3b-4c1e-9d7a-2b1c3d4e5f60``.

    Raises:
        errors.ConfigError: the file cannot be read or is empty.
    """
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError as err:
        raise errors.ConfigError(f"cannot read the boot ID from {path}: {err}") from err
    boot_id = text.strip()
    if not boot_id:
        raise errors.ConfigError(f"the boot ID file {path} is empty")
    return boot_id
