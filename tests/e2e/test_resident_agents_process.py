"""``test_resident_agents`` on process-mode nodes: the agent is a process per node, and so is
the ``nvidia-imex`` it starts (the stand-in from the node's driver root, ``/driver-root``)."""

from __future__ import annotations

import pytest

from tests.e2e.test_resident_agents import (  # noqa: F401  (collected here, on process nodes)
    SHAPE,
    resident,
    test_a_cd_forms_with_no_pod_created_and_leaves_nothing,
)

pytestmark = pytest.mark.timeout(1200)
NODES_MODE = "process"
