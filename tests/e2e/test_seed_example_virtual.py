"""The seed example end to end on virtual nodes (``cdctl sim up --nodes-mode virtual``).

The same test as ``test_seed_example`` (its function, collected here against a sim whose nodes
run the kubelet plugin, the daemons and the IMEX stand-in as tasks of the sim's process); it
also checks that no plugin, daemon or IMEX process ran while the domain was formed.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_seed_example import (  # noqa: F401  (collected here, on virtual nodes)
    test_seed_example_forms_one_domain_and_leaves_nothing,
)

pytestmark = pytest.mark.timeout(1200)
NODES_MODE = "virtual"
