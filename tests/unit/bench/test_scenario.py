"""The 64+8 manifest as the scenario applies it: racks filled in, the warm annotation optional."""

from __future__ import annotations

from compute_domains.api import names
from compute_domains.bench import scenario
from compute_domains.cli import options
from compute_domains.sim import trainer

RACKS = (trainer.Rack("a", "uuid-a"), trainer.Rack("b", "uuid-b"))


def _manifest() -> str:
    return (options.repo_root() / scenario.MANIFEST).read_text()


def test_render_fills_in_the_racks_and_keeps_the_guides_objects() -> None:
    docs = scenario.render(_manifest(), RACKS, warm=True)
    kinds = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert kinds == [
        ("PriorityClass", "training-high-priority"),
        ("PriorityClass", "spare-low-priority"),
        ("ComputeDomain", scenario.CD_NAME),
        ("Pod", "spare-a-0"),
        ("Pod", "spare-a-1"),
        ("Pod", "spare-b-0"),
        ("Pod", "spare-b-1"),
    ]
    low = docs[1]
    assert (low["value"], low["preemptionPolicy"]) == (100, "Never")
    cd = docs[2]
    assert cd["spec"] == {
        "numNodes": 36,
        "channel": {"resourceClaimTemplate": {"name": scenario.CHANNEL_TEMPLATE}},
    }
    assert cd["metadata"]["annotations"] == {
        names.WARM_NODES_ANNOTATION: "nvidia.com/gpu.clusteruuid in (uuid-a,uuid-b)"
    }
    for pod in docs[3:]:
        rack = pod["metadata"]["name"].split("-")[1]
        assert pod["spec"]["nodeSelector"] == {trainer.CLUSTER_UUID_LABEL: f"uuid-{rack}"}
        assert "resourceClaims" not in pod["spec"]
        assert pod["spec"]["priorityClassName"] == "spare-low-priority"
        assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 4}}


def test_without_warm_spares_the_manifest_is_nvidias() -> None:
    cd = scenario.render(_manifest(), RACKS, warm=False)[2]
    assert "annotations" not in cd["metadata"]
