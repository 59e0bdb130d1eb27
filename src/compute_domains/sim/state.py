"""The on-disk record of one simulated cluster: where it lives and what runs there.

``<home>/sims/<name>/`` holds ``state.json`` (the supervisor's pid and phase, ``SimState``),
the control plane's folder (certificates, kubeconfigs, etcd data, logs, and ``endpoints.json``:
where its components listen, ``Endpoints``, written by ``controlplane.ControlPlane``) and the
supervisor's own log. The record is what lets ``cdctl sim down`` stop a sim started by another
shell, and lets ``up`` tell a running sim from the remains of one that was killed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from compute_domains.containers import procs

Phase = Literal["starting", "ready", "failed", "stopping"]


@dataclasses.dataclass(frozen=True, slots=True)
class SimPaths:
    """Paths of one sim under the sim home."""

    home: Path
    name: str

    @property
    def root(self) -> Path:
        """The sim's own folder."""
        return self.home / "sims" / self.name

    @property
    def state_file(self) -> Path:
        """The supervisor's record (``state.json``)."""
        return self.root / "state.json"

    @property
    def control_plane(self) -> Path:
        """The control plane's state folder."""
        return self.root / "controlplane"

    @property
    def supervisor_log(self) -> Path:
        """The supervisor's log file."""
        return self.root / "supervisor.log"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig users point ``KUBECONFIG`` at."""
        return self.control_plane / "kubeconfig" / "admin.yaml"

    def node_root(self, node: str) -> Path:
        """A node's root folder (the real short path, usable for unix sockets)."""
        return (self.root / "nodes").resolve() / node

    def endpoints(self) -> Endpoints | None:
        """The control plane's endpoints once it was ready, else None."""
        path = self.control_plane / "endpoints.json"
        try:
            return Endpoints.from_json(path.read_text())
        except (OSError, ValueError, TypeError):
            return None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SimState:
    """What ``state.json`` says."""

    name: str
    phase: Phase
    supervisor_pid: int
    bin_dir: str
    created: float
    error: str = ""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def with_phase(self, phase: Phase, error: str = "") -> SimState:
        """A copy in another phase."""
        return dataclasses.replace(self, phase=phase, error=error)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Endpoints:
    """Where a running control plane listens; written as ``endpoints.json`` when ready."""

    api_server: str
    etcd: str
    admin_kubeconfig: str
    ca_file: str
    pids: dict[str, int]
    metrics: dict[str, str] = dataclasses.field(default_factory=dict)
    """Component → its ``/metrics`` URL (controller-manager and scheduler; they serve
    self-signed certificates and need an identity allowed to read them: the admin's)."""

    def to_json(self) -> str:
        """Serialise for the state folder."""
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Endpoints:
        """Parse what ``to_json`` wrote."""
        return cls(**json.loads(text))


def write_state(paths: SimPaths, state: SimState) -> None:
    """Write ``state.json`` atomically (readers never see half a record)."""
    paths.root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=paths.root, prefix=".state.")
    with os.fdopen(fd, "w") as fh:
        json.dump(dataclasses.asdict(state), fh, indent=1)
    os.replace(tmp, paths.state_file)


def read_state(paths: SimPaths) -> SimState | None:
    """The recorded state, or None when there is no (readable) record."""
    try:
        data = json.loads(paths.state_file.read_text())
        return SimState(**data)
    except (OSError, ValueError, TypeError):
        return None


def supervisor_alive(paths: SimPaths, state: SimState) -> bool:
    """True when the recorded supervisor still runs (and is really ours, not a reused pid)."""
    if not procs.pid_alive(state.supervisor_pid):
        return False
    cmdline = procs.pid_cmdline(state.supervisor_pid)
    return "serve" in cmdline and str(paths.home) in cmdline
