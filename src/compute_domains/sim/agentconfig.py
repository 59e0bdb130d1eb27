"""What the node agent (``agent.NodeAgent``) needs to run a shape of nodes: ``AgentSettings``.

Frozen and built in one place per process kind: by the sim's supervisor (``sim.cluster``) for
an agent of its own, or from the plan a node host is handed (``sim.hosts``: ``plan_json`` and
``settings_from_plan`` carry every field but the in-process programs table). Paths are the
sim's (its folder, the control plane's PKI, the NVML stand-in and stand-in programs); switches
say how nodes run (virtual or process, shared caches, DRANET's stand-in).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from compute_domains.containers import virtual
from compute_domains.sim import topology
from compute_domains.sim.kubelet import config


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AgentSettings:
    """What the agent needs to run a shape of nodes."""

    shape: topology.Shape
    sim_root: Path
    """The sim's folder (``nodes`` there links to the node roots)."""
    pki_dir: Path
    """The control plane's PKI folder (CA that signs node certificates)."""
    api_server: str
    """``https://127.0.0.1:<port>``."""
    isolate: bool
    """Private mount namespaces for containers (root only)."""
    nvml_lib_dir: Path | None = None
    """Folder holding the NVML stand-in ``libnvidia-ml.so.1`` (copied into every node's driver
    root); None leaves nodes without NVML."""
    stand_in_bin: Path | None = None
    """Folder with the workload stand-ins put on the PATH of user images (never IMEX)."""
    image_map: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    """Image repository → folder of its files (``sim.images``)."""
    address_slot: int = 0
    """Loopback address slot of this sim (``sim.slots``)."""
    releases: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    """Project image tag → ``bin`` folder of an earlier release (``sim.releases``); none by
    default, so every tag runs this installation."""
    kubelet: config.KubeletSettings = dataclasses.field(default_factory=config.KubeletSettings)
    virtual_nodes: bool = False
    """Virtual nodes: containers whose program is known run as tasks of this process
    (``containers.virtual``); False: every container is a process."""
    programs: virtual.Programs | None = None
    """With ``virtual_nodes``: the in-process programs (``pause`` always is one)."""
    nodes: frozenset[str] | None = None
    """The nodes this agent runs (a node host's share, ``sim.hosts``); None: the whole shape."""
    shared_informers: bool = True
    """With ``virtual_nodes``: one watch per kind for the whole host (``agent``'s docstring);
    False: every in-process component opens its own, as in process mode (a measurement's
    baseline)."""
    dranet: bool = False
    """Run DRANET's stand-in (``sim.dranet``) on the GPU nodes: the ``dra.net`` DRA driver
    with each node's RDMA NICs. Its namespace and RBAC must exist (``dranet.install``)."""
