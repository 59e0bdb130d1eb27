"""NVIDIA's feature gates as compute-domains has them: fixed values, one setting, one rendering."""

from __future__ import annotations

import json

from compute_domains.api import featuregates


def test_fixed_gates_are_nvidias_defaults_for_compute_domains() -> None:
    gates = featuregates.effective()
    assert gates["IMEXDaemonsWithDNSNames"] is True
    assert gates["ComputeDomainCliques"] is True
    for gpu_only in ("MPSSupport", "DynamicMIG", "PassthroughSupport", "TimeSlicingSettings"):
        assert gates[gpu_only] is False
    assert "CrashOnNVLinkFabricErrors" not in gates  # a plugin setting, unknown here


def test_strict_fabric_is_the_crash_on_fabric_errors_gate() -> None:
    assert featuregates.effective(strict_fabric=False)["CrashOnNVLinkFabricErrors"] is False
    assert featuregates.effective(strict_fabric=True)["CrashOnNVLinkFabricErrors"] is True


def test_rendering_is_compact_sorted_json_as_nvidias_tooling_greps_it() -> None:
    text = featuregates.render(featuregates.effective(strict_fabric=True))
    assert '"MPSSupport":false' in text
    assert list(json.loads(text)) == sorted(json.loads(text))
