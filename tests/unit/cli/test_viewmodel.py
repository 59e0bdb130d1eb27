"""``cdctl status``/``topology`` views: the data, and the text at 80 columns."""

import io
import re
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from compute_domains.api import names
from compute_domains.cli import viewmodel, views

CD_UID = "11111111-2222-3333-4444-555555555555"


def _cd(status: str, nodes: list[dict[str, object]]) -> dict[str, object]:
    return {
        "metadata": {"name": "cd0", "namespace": "team", "uid": CD_UID},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "cd0-rct"}}},
        "status": {"status": status, "nodes": nodes},
    }


def _pod(name: str, node: str, ready: bool, **extra: object) -> dict[str, object]:
    pod: dict[str, object] = {
        "metadata": {
            "name": name,
            "namespace": extra.pop("namespace", "team"),
            "labels": extra.pop("labels", {}),
        },
        "spec": {"nodeName": node, **extra.pop("spec", {})},  # type: ignore[dict-item]
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": extra.pop("containerStatuses", []),
        },
    }
    return pod


def _node(
    name: str, clique: str | None, held: str | None = None, ready: bool = True
) -> dict[str, object]:
    labels = {}
    if clique:
        labels[names.GPU_CLIQUE_LABEL] = clique
    if held:
        labels[names.COMPUTE_DOMAIN_LABEL] = held
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {
            "capacity": {"nvidia.com/gpu": "4"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_status_joins_nodes_daemons_workloads_and_explains_not_ready() -> None:
    cd = _cd(
        "NotReady",
        [
            {
                "name": "n1",
                "cliqueID": "c.1",
                "index": 1,
                "ipAddress": "127.0.0.2",
                "status": "NotReady",
            },
            {
                "name": "n0",
                "cliqueID": "c.1",
                "index": 0,
                "ipAddress": "127.0.0.1",
                "status": "Ready",
            },
        ],
    )
    daemons = [
        _pod("d0", "n0", True, namespace="driver", labels={names.COMPUTE_DOMAIN_LABEL: CD_UID}),
        _pod(
            "d1",
            "n1",
            False,
            namespace="driver",
            labels={names.COMPUTE_DOMAIN_LABEL: CD_UID},
            containerStatuses=[
                {
                    "ready": False,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 4s"}},
                }
            ],
        ),
        _pod(
            "other",
            "n1",
            True,
            namespace="driver",
            labels={names.COMPUTE_DOMAIN_LABEL: "someone-else"},
        ),
    ]
    pods = [
        _pod(
            "w0",
            "n0",
            True,
            spec={"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "cd0-rct"}]},
        ),
        _pod("unrelated", "n0", True),
    ]
    events = [
        {
            "type": "Warning",
            "reason": "CliqueFull",
            "message": "no index left",
            "involvedObject": {"uid": CD_UID},
            "lastTimestamp": "2026-01-01T00:00:00Z",
        }
    ]
    [view] = viewmodel.status_view([cd], daemons, pods, events)
    assert (view["readyNodes"], view["totalNodes"]) == (1, 2)
    assert [n["name"] for n in view["nodes"]] == ["n0", "n1"]
    assert view["cliques"] == {"c.1": [0, 1]}
    assert [d["name"] for d in view["daemonPods"]] == ["d0", "d1"]
    assert [w["name"] for w in view["workloadPods"]] == ["w0"]
    assert view["reasons"][0] == "event CliqueFull: no index left"
    assert "daemon d1 on n1: CrashLoopBackOff: back-off 4s" in view["reasons"]


def test_ready_cd_has_no_reasons() -> None:
    cd = _cd("Ready", [{"name": "n0", "cliqueID": "c.1", "index": 0, "status": "Ready"}])
    [view] = viewmodel.status_view([cd], [], [], [])
    assert view["reasons"] == []
    assert view["status"] == "Ready"


def test_topology_groups_by_clique_and_shows_holders() -> None:
    cds = [{"metadata": {"name": "cd0", "namespace": "team", "uid": CD_UID}}]
    nodes = [
        _node("a", "c.1", held=CD_UID),
        _node("b", "c.1"),
        _node("c", "c.2", ready=False),
        _node("d", None),
        _node("e", "c.2", held="gone-uid"),
        # A control-plane node: no GPU capacity, no GPU labels; it belongs to no domain.
        {"metadata": {"name": "cp", "labels": {}}, "status": {"capacity": {"cpu": "8"}}},
    ]
    view = viewmodel.topology_view(nodes, cds)
    cliques = [d["clique"] for d in view["domains"]]
    assert cliques == ["c.1", "c.2", None]
    c1, c2, plain = view["domains"]
    assert c1["heldBy"] == ["team/cd0"] and c1["free"] == 1 and c1["gpus"] == 8
    assert c2["free"] == 0  # one NotReady, one held by a CD that no longer exists
    assert c2["heldBy"] == ["<deleted CD gone-uid>"]
    assert [n["name"] for n in plain["nodes"]] == ["d"]


def _rack_view(nodes: int, reason: str, message: str) -> list[dict[str, object]]:
    entries: list[dict[str, object]] = [
        {
            "name": f"gb200-r0-n{i:02d}",
            "cliqueID": "c0ffee00-0000-0000-0000-000000000001.7",
            "index": i,
            "ipAddress": f"127.0.0.{i + 10}",
            "status": "Ready",
        }
        for i in range(nodes)
    ]
    entries.append(
        {
            "name": "gb200-r0-n18",
            "cliqueID": "c0ffee00-0000-0000-0000-000000000001.7",
            "index": -1,
            "ipAddress": "",
            "status": "NotReady",
        }
    )
    cd = _cd("NotReady", entries)
    cd["status"]["conditions"] = [  # type: ignore[index]
        {"type": "Ready", "status": "False", "reason": reason, "message": message}
    ]
    pods = [
        _pod(
            f"worker-{i}",
            f"gb200-r0-n{i:02d}",
            True,
            spec={"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "cd0-rct"}]},
        )
        for i in range(nodes + 1)
    ]
    return viewmodel.status_view([cd], [], pods, [])


def test_status_says_what_the_controller_says() -> None:
    message = "node gb200-r0-n18 cannot join clique c.7: it is full (18 of 18 slots)"
    [view] = _rack_view(18, "CliqueFull", message)
    assert view["reason"] == "CliqueFull"
    assert view["reasons"][0] == f"CliqueFull: {message}"
    deleting = _cd("Ready", [])
    deleting["status"]["conditions"] = [  # type: ignore[index]
        {"type": "Ready", "status": "True", "reason": "AllNodesReady", "message": "all"},
        {"type": "Deleting", "status": "True", "reason": "WaitingForWorkload", "message": "w"},
    ]
    [view] = viewmodel.status_view([deleting], [], [], [])
    assert view["reasons"] == ["deleting (WaitingForWorkload): w"]


def test_status_text_fits_80_columns_with_whole_node_names() -> None:
    message = (
        "node gb200-r0-n18 cannot join clique c0ffee00-0000-0000-0000-000000000001.7: "
        "it is full (18 of 18 slots, maxNodesPerIMEXDomain)"
    )
    out = io.StringIO()
    console = Console(file=out, width=80, color_system=None, legacy_windows=False)
    views.render_status(_rack_view(18, "CliqueFull", message), console)
    text = out.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    for i in range(19):  # each node's row starts with its whole name
        assert re.search(rf"^\s*gb200-r0-n{i:02d}\s", text, re.M), text
    assert "why: CliqueFull: node gb200-r0-n18 cannot join clique" in " ".join(lines)
    assert "maxNodesPerIMEXDomain" in text.replace("\n", "")
    assert "worker-18" in text


def test_topology_summary_of_64_racks_is_one_row_per_rack_in_rack_order_at_80_columns() -> None:
    cds = [{"metadata": {"name": "big", "namespace": "team", "uid": CD_UID}}]
    nodes = [
        _node(
            f"gb200-r{r}-n{i:02d}",
            f"c0ffee00-0000-0000-0000-{r:012d}.7",
            held=CD_UID if r < 2 else None,
            ready=(r, i) != (5, 3),
        )
        for r in reversed(range(64))
        for i in range(18)
    ]
    view = viewmodel.topology_view(nodes, cds)
    out = io.StringIO()
    views.render_topology_summary(
        view, Console(file=out, width=80, color_system=None, legacy_windows=False)
    )
    text = out.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    assert " ".join(lines[:2]).replace("  ", " ") == (
        "64 NVLink domains, 1152 GPU nodes (1151 ready, 1115 free), 4608 GPUs; held by: team/big"
    )
    rows = [line.split() for line in lines if line.strip().startswith("gb200-")]
    assert [r[0] for r in rows] == [f"gb200-r{r}-n00..gb200-r{r}-n17" for r in range(64)]
    assert rows[0][2:] == ["18/18", "72", "0", "team/big"]
    assert rows[5][2:] == ["17/18", "72", "17", "-"]
    assert len(lines) <= 64 + 6  # totals (2 lines at 80 columns), header, rule, the racks


def test_topology_lists_nodes_up_to_four_racks_and_summarises_above_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def shape(racks: int) -> dict[str, Any]:
        nodes = [_node(f"gb200-r{r}-n{i:02d}", f"c.{r}") for r in range(racks) for i in range(18)]
        return viewmodel.topology_view(nodes, [])

    def run(racks: int, *flags: str) -> str:
        async def fake(kubeconfig: object) -> dict[str, Any]:
            return shape(racks)

        monkeypatch.setattr(views, "_topology", fake)
        result = CliRunner().invoke(views.topology, list(flags))
        assert result.exit_code == 0, result.output
        return result.output

    assert "gb200-r3-n17" in run(4)  # 72 nodes: every node listed
    assert "gb200-r4-n00..gb200-r4-n17" in run(5)
    assert "gb200-r4-n07" not in run(5)
    assert "gb200-r4-n07" in run(5, "--nodes")
    assert "gb200-r0-n00..gb200-r0-n17" in run(1, "--summary")


def test_status_lists_the_pods_of_the_job_that_wait_for_the_scheduler() -> None:
    message = "0/4 nodes are available: 4 cannot allocate all claims."
    claim = {"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "cd0-rct"}]}
    placed = _pod("w0", "n0", True, spec=claim)
    waiting = _pod("w3", "", False, spec=claim)
    waiting["status"]["conditions"] = [  # type: ignore[index]
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    ]
    fresh = _pod("w4", "", False, spec=claim)
    cd = _cd("NotReady", [{"name": "n0", "cliqueID": "c.1", "index": 0, "status": "Ready"}])
    cd["status"]["conditions"] = [  # type: ignore[index]
        {"type": "Ready", "status": "False", "reason": "PodsPending", "message": "m"}
    ]
    [view] = viewmodel.status_view([cd], [], [placed, waiting, fresh], [])
    assert view["pendingPods"] == [
        {"name": "w3", "scheduler": message},
        {"name": "w4", "scheduler": "not tried by the scheduler yet"},
    ]
    out = io.StringIO()
    views.render_status([view], Console(file=out, width=80, color_system=None))
    text = " ".join(out.getvalue().split())
    assert f"pending: pod w3: {message}" in text, text
    assert "pending: pod w4: not tried by the scheduler yet" in text, text
