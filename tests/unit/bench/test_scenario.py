"""The guide's §15.6 file as the scenario applies it: its ClusterUUID placeholders filled in by
rack, our warm-nodes annotation added only with warm spares."""

from __future__ import annotations

import pytest

from compute_domains.api import names
from compute_domains.bench import scenario
from compute_domains.cli import options
from compute_domains.sim import trainer

RACKS = (trainer.Rack("a", "uuid-a"), trainer.Rack("b", "uuid-b"))


def _manifest() -> str:
    return (options.repo_root() / scenario.MANIFEST).read_text()


def test_render_fills_in_the_racks_and_adds_the_warm_annotation() -> None:
    docs = scenario.render(_manifest(), RACKS, warm=True)
    cd = next(d for d in docs if d["kind"] == "ComputeDomain")
    assert cd["metadata"]["annotations"] == {
        names.WARM_NODES_ANNOTATION: "nvidia.com/gpu.clusteruuid in (uuid-a,uuid-b)"
    }
    text = repr(docs)
    assert not any(u in text for u in scenario.GUIDE_UUIDS)
    for pod in (d for d in docs if d["kind"] == "Pod"):
        rack = pod["metadata"]["name"].split("-")[1]
        spec = pod["spec"]
        if "nodeSelector" in spec:
            assert spec["nodeSelector"] == {trainer.CLUSTER_UUID_LABEL: f"uuid-{rack}"}
        else:
            term = spec["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]
            assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [f"uuid-{rack}"]


def test_without_warm_spares_the_file_is_the_guides() -> None:
    docs = scenario.render(_manifest(), RACKS, warm=False)
    cd = next(d for d in docs if d["kind"] == "ComputeDomain")
    assert "annotations" not in cd["metadata"]


def test_a_file_without_the_guides_placeholders_or_a_second_rack_is_refused() -> None:
    with pytest.raises(ValueError, match="no ClusterUUID placeholder '89164aa7-"):
        scenario.render(_manifest().replace(scenario.GUIDE_UUIDS[1], "x"), RACKS, warm=True)
    with pytest.raises(ValueError, match="needs two racks"):
        scenario.render(_manifest(), RACKS[:1], warm=True)
