"""The ComputeDomain controller: per-CD DaemonSet and claim templates, true status, cleanup.

Other packages use only ``Controller`` and the settings classes; everything else is internal.
"""

from compute_domains.controller.config import (
    ControllerSettings,
    DaemonSettings,
    LeaderElectionSettings,
)
from compute_domains.controller.controller import Controller

__all__ = ["Controller", "ControllerSettings", "DaemonSettings", "LeaderElectionSettings"]
