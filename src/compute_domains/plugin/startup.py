"""The kubelet plugin's start-up steps before it serves: folders, base CDI spec, checkpoint.

``plugin.app`` runs these in its start-up step 2: ``prepare_folders`` (the plugin's folders,
the CDI root and the base CDI spec from the driver root) and ``open_checkpoint`` (the
checkpoint opened for the current boot: one of an earlier boot is reset, a corrupt one stops
start-up unless quarantining is enabled). Each logs to the logger it is handed, ``plugin.app``'s,
so the start-up lines keep the logger they always had. Nothing here is global.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from pathlib import Path

from compute_domains.infra import errors
from compute_domains.plugin import basespec, cdi, checkpointfile, state
from compute_domains.plugin.config import PathSettings


def prepare_folders(
    paths: PathSettings, driver_version: str, *, node: str, log: logging.Logger
) -> None:
    """The plugin's folders, the domains' folder and the CDI root; the base CDI spec (the
    driver root's IMEX programs, libraries, device nodes and sockets) written afresh."""
    extra = {"node": node}
    paths.local(paths.plugin_dir).mkdir(parents=True, exist_ok=True, mode=0o750)
    paths.local(paths.domains_dir).mkdir(parents=True, exist_ok=True, mode=0o755)
    cdi_root = paths.local(paths.cdi_root)
    cdi_root.mkdir(parents=True, exist_ok=True, mode=0o755)
    files = basespec.discover(
        paths.driver_root_view, driver_version, host_dev=paths.local(Path("/"))
    )
    log.info(
        "driver root %s: %d device nodes, programs %s, %d libraries, %d sockets, "
        "%d firmware files for the IMEX daemon's base CDI spec",
        paths.driver_root,
        len(files.devices),
        ", ".join(Path(b).name for b in files.binaries) or "none",
        len(files.libraries),
        len(files.sockets),
        len(files.firmware),
        extra=extra,
    )
    if files.missing_imex():
        # Not fatal: channels still work; only ComputeDomain daemons need IMEX, and they
        # say so themselves when they cannot start it.
        log.warning(
            "driver root %s has no %s: IMEX daemons on this node cannot start; install "
            "the driver's IMEX package or set nvidiaDriverRoot to where the driver lives",
            paths.driver_root,
            " or ".join(files.missing_imex()),
            extra=extra,
        )
    cdi.CdiWriter(cdi_root).write_base_spec(
        cdi.build_base_spec(basespec.edits(files, paths.driver_root))
    )


async def open_checkpoint(
    device_state: state.DeviceState,
    boot_id: str,
    *,
    quarantine: bool,
    node: str,
    log: logging.Logger,
) -> None:
    """Open the checkpoint for ``boot_id``: one of an earlier boot is reset (its claims
    dropped, said in a warning); a corrupt one stops start-up, or with ``quarantine`` is moved
    aside and the checkpoint starts empty."""
    path = device_state.checkpoint_path
    try:
        boot = await device_state.open_for_boot(boot_id)
    except checkpointfile.CheckpointCorruptError as err:
        if not quarantine:
            raise errors.ConfigError(
                f"{err}; move the file aside (or start with checkpoint quarantining enabled) "
                "to start with an empty checkpoint"
            ) from err
        moved = await asyncio.to_thread(
            checkpointfile.quarantine, path, now=datetime.datetime.now(datetime.UTC)
        )
        log.error("quarantined corrupt checkpoint to %s: %s", moved, err)
        boot = await device_state.open_for_boot(boot_id)
    if boot.discarded:
        log.warning(
            "Invalidating checkpoint: node rebooted (boot %s → %s); dropped %d claims",
            boot.previous_boot_id,
            boot_id,
            len(boot.discarded),
            extra={"node": node},
        )
