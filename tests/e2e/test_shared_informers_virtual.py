"""One watch per kind per node host on virtual nodes (issue 28 point 2), on the real control plane.

The same rack of virtual nodes is started twice with the chart installed: once as shipped (the
node host hands its shared caches to every simulated kubelet and every in-process plugin and
daemon) and once with ``sim serve --own-watches`` (each component opens its own, as before issue
28 and as in process mode). The kube-apiserver's own gauge of open watches
(``apiserver_longrunning_requests{verb="WATCH"}``, by resource) is read when the driver is up
and again once a domain over every GPU node has formed; its LIST counter of ComputeDomains
(``apiserver_request_total``) across the formation. Differences between the two sims and
between the two moments cancel the control plane's own watches, so the numbers asserted are
exactly what the node components open:

* idle: with own watches, each of the ``K`` plugins watches its Node, its ResourceSlices and the
  ComputeDomains (``plugin.computedomain.own_cache``) and each of the ``K + 1`` kubelets its
  pods; shared, the host holds one watch of each kind (plus one of cliques, which the plugins'
  prepares read);
* formation: with own watches every daemon adds a clique watch and a pod watch; shared, the
  formation adds none, although every daemon registered and turned Ready (it saw its clique and
  its pod) and every workload pod runs (every plugin saw its CD and its clique entry);
* a prepare lists no ComputeDomain when the host's cache holds its CD; with own watches a
  plugin's own cache answers too, and it lists only for a CD its watch has not delivered yet.

The control plane opens watches of its own on the two custom resources some time after the chart
installs their CRDs: kube-controller-manager's resource-quota monitor (whose informers the garbage
collector shares) discovers new resources every 30 s. Each sim's idle counts are taken only once
that watch is open (``CONTROL_PLANE``), so it cancels like the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod

from compute_domains.bench import apicounts
from compute_domains.cli import options
from compute_domains.infra import kube
from compute_domains.sim import lifecycle, state, toolchain, topology
from tests.conftest import keep_sims
from tests.e2e import helpers

pytestmark = pytest.mark.timeout(1500)

K = 4
"""GPU nodes (one rack); the sim adds its control-plane node (a kubelet, no plugin)."""
SHAPE = topology.Shape(racks=1, nodes_per_rack=K, gpus_per_node=4)
KINDS = ("pods", "nodes", "resourceslices", "computedomaincliques", "computedomains")
CONTROL_PLANE = {"computedomaincliques": 1, "computedomains": 1}
"""kube-controller-manager's watches of the two custom resources (resource-quota monitor)."""
CONTROLLER = {"computedomaincliques": 1, "computedomains": 1}
"""Our controller's watches of them (its caches)."""


@dataclasses.dataclass
class Measured:
    idle: Counter[str]
    formed: Counter[str]
    lists: int
    """LIST requests of ComputeDomains during the formation."""


@contextlib.contextmanager
def _sim(toolset: toolchain.Toolset, home: Path, shared: bool) -> Iterator[state.SimPaths]:
    paths = state.SimPaths(home, "informers" if shared else "ownwatch")
    started = lifecycle.start(
        paths,
        toolset.bin_dir,
        die_with_parent=True,
        shape=SHAPE,
        chart=options.chart_dir(),
        nodes_mode="virtual",
        shared_informers=shared,
    )
    try:
        yield paths
    finally:
        lifecycle.stop(paths, process=started.process, remove=not keep_sims())


def _fetch(paths: state.SimPaths) -> apicounts.MetricsFetch:
    async def fetch() -> str:
        return await asyncio.to_thread(helpers.kubectl, paths, "get", "--raw", "/metrics")

    return fetch


Check = Callable[[Counter[str]], bool]


async def _settled(fetch: apicounts.MetricsFetch, ok: Check, what: str) -> Counter[str]:
    """The watch counts once ``ok(counts)`` holds (watches open a moment after a pod is Ready
    and reconnect now and then: the condition is waited for, not sampled once)."""
    last: list[Counter[str]] = [Counter()]

    async def check() -> bool:
        last[0] = await apicounts.watch_counts(fetch)
        return ok(last[0])

    try:
        await helpers.within(90, check, what, interval=1.0)
    except AssertionError as err:
        counts = {k: last[0][k] for k in KINDS}
        raise AssertionError(f"{err}; watches of the node components' kinds: {counts}") from err
    return last[0]


async def _measure(
    paths: state.SimPaths,
    idle_ok: Check,
    formed_ok: Callable[[Counter[str], Counter[str]], bool],
) -> Measured:
    fetch = _fetch(paths)
    admin = kube.client(kube.KubeSettings(kubeconfig=paths.kubeconfig, field_manager="tests"))
    try:
        idle = await _settled(fetch, idle_ok, "the idle watch counts")
        lists0 = (await apicounts.request_counts(fetch))["LIST computedomains"]
        await helpers.create_cd(admin, "shared-informers")
        # The controller makes the channel template ``<cd>-rct`` from the CD.
        await admin.create(helpers.workload_deployment("job", "shared-informers-rct", K))

        async def running() -> bool:
            pods = [p async for p in admin.list(Pod, namespace="default", labels={"job": "job"})]
            return len(pods) == K and all(helpers.ready(p) for p in pods)

        await helpers.within(600, running, f"{K} workload pods Running")
        lists1 = (await apicounts.request_counts(fetch))["LIST computedomains"]
        formed = await _settled(
            fetch,
            lambda c: formed_ok(idle, c),
            "the formed watch counts",
        )
        await admin.delete(Deployment, "job", namespace="default")
        return Measured(idle=idle, formed=formed, lists=lists1 - lists0)
    finally:
        await admin.close()


def _delta(a: Counter[str], b: Counter[str]) -> dict[str, int]:
    return {k: a[k] - b[k] for k in KINDS}


async def test_one_watch_per_kind_per_host(toolset: toolchain.Toolset, sim_home: Path) -> None:
    with _sim(toolset, sim_home, shared=True) as paths:
        shared = await _measure(
            paths,
            # Every kind has the host's watch once the driver is up; the custom resources also
            # the controller's and the control plane's (module docstring).
            idle_ok=lambda c: (
                all(c[k] >= 1 for k in KINDS)
                and all(c[k] >= CONTROL_PLANE[k] + CONTROLLER[k] + 1 for k in CONTROL_PLANE)
            ),
            formed_ok=lambda idle, c: _delta(c, idle) == dict.fromkeys(KINDS, 0),
        )
    # Shared: the formation (K daemons, K prepares) opened no watch and listed no CD.
    assert _delta(shared.formed, shared.idle) == dict.fromkeys(KINDS, 0)
    assert shared.lists == 0

    per_component = {
        "pods": K + 1 - 1,  # K + 1 kubelets, or the host's one watch
        "nodes": K - 1,  # K plugins' Node watches
        "resourceslices": K - 1,  # K plugins' slice watches
        "computedomaincliques": -1,  # the host's cache; idle plugins watch no clique
        "computedomains": K - 1,  # K plugins' own caches, or the host's one
    }
    with _sim(toolset, sim_home, shared=False) as paths:
        own = await _measure(
            paths,
            idle_ok=lambda c: _delta(c, shared.idle) == per_component,
            formed_ok=lambda idle, c: (
                (
                    _delta(c, idle)["computedomaincliques"],
                    _delta(c, idle)["pods"],
                )
                == (K, K)
            ),
        )
    assert _delta(own.idle, shared.idle) == per_component
    # Own watches: every daemon follows its clique and its pod with a watch of its own.
    added = _delta(own.formed, own.idle)
    assert (added["computedomaincliques"], added["pods"]) == (K, K), added
    # A plugin's own cache answers its prepares as well; it lists only for a CD its watch has
    # not delivered yet, at most once a prepare.
    assert own.lists <= K, own.lists
