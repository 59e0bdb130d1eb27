"""Why the simulated kubelet cannot start a pod's container yet, in the kubelet's own words.

Each error's message is what the real kubelet shows (in the pod's events and its container's
waiting message); the pod worker reports it and retries with back-off.
"""

from __future__ import annotations


class PrepareError(Exception):
    """DRA preparation failed; the message is the kubelet's (shown in the pod's event)."""


class CreateError(Exception):
    """The runtime cannot create the container (waiting reason ``CreateContainerError``)."""
