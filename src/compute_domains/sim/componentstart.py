"""Whether one control-plane component came up: its loopback port, its health, why it failed.

``free_port`` picks a loopback port nothing holds right now (another process may still bind it
first: the component then exits with "address already in use", which ``wait_healthy`` reports
as ``PortTaken`` so the control plane starts again on fresh ports); ``check_port_free`` refuses
a port the settings name that is taken already. ``wait_healthy`` polls a component's health
endpoint until it answers 200, with a short capped backoff (health endpoints have no watch),
and fails the start when the process exits first or the start time is up, with its log tail
(``died_message``, also used when a running component dies). ``controlplane.ControlPlane``
starts the components and logs what these find.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from pathlib import Path

import httpx2 as httpx

from compute_domains.containers import procs
from compute_domains.sim import errors

_ADDRESS_IN_USE = "address already in use"


class PortTaken(errors.SimError):
    """A component exited at start because another process held the port chosen for it."""


def _log_since(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def check_port_free(port: int) -> None:
    """Fail with a clear message when ``127.0.0.1:port`` is already taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as err:
            raise errors.SimError(
                f"port 127.0.0.1:{port} is already in use ({err.strerror}); "
                "stop whatever holds it or choose another port"
            ) from err


async def wait_healthy(
    child: procs.Child,
    url: str,
    ca: Path | None,
    *,
    timeout_s: float,
    log_from: int | None = None,
) -> None:
    """Until ``url`` answers 200; a child that exits first fails the start, with
    :class:`PortTaken` when the log it wrote from byte ``log_from`` on (None: not asked)
    says its port was taken; so does a child not healthy within ``timeout_s``."""
    # Local health endpoints only; controller-manager and scheduler serve self-signed
    # certificates they generate themselves, so those checks skip verification.
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca)) if ca else False
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    async with httpx.AsyncClient(verify=verify, timeout=2.0) as http:
        while True:
            if child.proc.returncode is not None:
                if log_from is not None and _ADDRESS_IN_USE in _log_since(child.log_path, log_from):
                    raise PortTaken(f"{child.name} could not bind its port (address in use)")
                raise errors.SimError(died_message(child))
            try:
                resp = await http.get(url)
                if resp.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise errors.SimError(
                    f"{child.name} did not turn healthy within {timeout_s:.0f}s "
                    f"(log: {child.log_path}):\n{child.log_tail()}"
                )
            # Health endpoints have no watch; a short capped backoff while starting.
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.5)


def died_message(child: procs.Child) -> str:
    """Why a component's process exited: its exit code, a hint when a port it needs was
    taken, and its log tail."""
    tail = child.log_tail()
    hint = ""
    if _ADDRESS_IN_USE in tail:
        hint = " (a port it needs is in use by another process)"
    return (
        f"{child.name} exited with code {child.proc.returncode}{hint}; "
        f"log {child.log_path}:\n{tail}"
    )
