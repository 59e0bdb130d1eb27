"""ResidentAgent: follow our Node's labels and run, in-process, what they ask for: one
per-domain CD's daemon, or the clique's shared IMEX.

``ResidentAgent.run()`` serves, when it has a metrics port, ``/metrics`` (what runs') and
``/readyz``, which answers:

* until it first passes in this process: whether the Node's ask has been read and acted on and
  what it asks runs: the own IMEX check of the served CD's daemon or of the shared IMEX (passing
  with nothing to run, or without a clique ID). A restarted agent's pod (``kill -9``) keeps its
  IP, and its previous process's registry or clique entry still says Ready; the registries'
  readers count an entry only while its agent pod is Ready (``api.agentpods``, the controller's
  status), so that pod must not be Ready again before what the Node asks runs again. Failing
  too while nothing runs on a node that will ask for the shared IMEX (``plan.awaits_shared``):
  with eager shared IMEX the plugin's label is part of every clique node's start-up, and the
  pod turns Ready once, when that IMEX passes, not Ready idle first (issue 28);
* after that: the own IMEX check of what runs once that IMEX passed it or exited (``health.
  ImexHealth.starting``), and passing otherwise: idle, while an ask is acted on, and while a
  newly asked IMEX starts. A new ask has no stale Ready entry behind it (its entry is new,
  NotReady until its daemon's own check writes it Ready, or was left NotReady when the shared
  IMEX stopped), so the pod stays Ready through a CD's formation, switch and deletion, and a
  CD turns Ready the moment its last entry does, not at the kubelet's next probe (period 5 s)
  after a NotReady one (issue 28: "last entry Ready → CD Ready"). An IMEX that fails later, or
  never started (``NV_ERR_IN_USE``: it exits), fails the probe.

Meanwhile it:

1. follows our Node by watch (``kubeops.node_wants``, no polling) and keeps the latest
   :class:`config.Wants` it asks for: a per-domain CD (the CD label) and/or the clique's shared
   IMEX (``compute-domains/shared-imex=on`` with a clique ID). Only a change of those wakes the
   agent: annotations (a CD's channel on the node) and status writes never do;
2. runs one thing at a time, as ``plan.choose`` says (what runs is kept while it is asked
   for; the shared IMEX comes before a per-domain CD when both are asked of an idle agent).
   A per-domain CD ``X`` is not served when it has its own per-CD DaemonSet (made before the
   switch to resident agents: its pod serves ``X``, and a second ``nvidia-imex`` must not
   start; the agent logs that and leaves ``X`` alone). To serve ``X``: read its name and
   namespace (log lines; read together with the DaemonSet check), label our pod
   ``resource.nvidia.com/computeDomain=X`` and with the clique ID (asking the controller for a
   clique slot; one patch), then run ``daemon.app.Daemon`` with the settings the CLI's factory
   builds for ``X``, marked ``resident``, as a task: it writes ``X``'s IMEX files in the per-CD
   folder, starts ``nvidia-imex`` and registers as ``X``'s own daemon pod would, except that
   it leaves the pod's labels to us and reports its entry Ready from its own IMEX check, not
   from our pod's ``Ready`` condition (``DaemonSettings.resident`` says why). To stop: remove
   both labels from our pod first (so the controller no longer counts us for ``X`` and will
   not give the entry back), then cancel the daemon, which stops IMEX and removes our clique
   entry; an unlabel that did not end within the bound is done again, with retries, once the
   daemon stopped (unless the next CD's label replaces it). The shared IMEX is
   ``shared.SharedImex``, run with the factory's settings for the pseudo-domain
   ``config.SHARED_FOLDER`` (files in ``<domains_dir>/shared-imex/``); it registers itself in
   ``shared-imex.<clique>``; to stop, it is cancelled: IMEX stops, its entry goes NotReady and
   keeps its index. Either stop is bounded by ``stop_timeout``: one that does not end in time
   ends the agent, so a second IMEX never starts beside a stuck one.

Invariant: at most one daemon or shared IMEX, so at most one ``nvidia-imex``, runs on the node;
a change stops the old one before the new one starts. One that fails ends ``run()`` with its
error (the container restarts, as a per-CD daemon pod's would); on cancellation (SIGTERM) what
runs is stopped as above, then ``run()`` ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from lightkube import AsyncClient

from compute_domains.agent import kubeops, labels, plan, shared
from compute_domains.agent.config import (
    AgentSettings,
    Assignment,
    DaemonFactory,
    Domain,
    Shared,
    Wants,
    shared_domain,
)
from compute_domains.api import imexsignal, names, sharedimex
from compute_domains.daemon import app as daemon_app
from compute_domains.daemon import launcher
from compute_domains.infra import errors, tasks
from compute_domains.infra import metrics as infra_metrics
from compute_domains.infra.kube import informers as kube_informers

logger = logging.getLogger(__name__)


class ResidentAgent:
    """One node's resident IMEX agent (see the module docstring).

    Args:
        settings: the agent's settings.
        client: API client (the agent pod's ServiceAccount).
        daemon_settings: builds the daemon settings for one CD, or for the pseudo-domain of
            the shared IMEX (``cli.daemon``'s builder).
        programs: how ``nvidia-imex`` runs (child processes when None; the simulator's virtual
            nodes pass an in-process launcher).
        rng: randomness for backoff jitter.
    """

    def __init__(
        self,
        settings: AgentSettings,
        client: AsyncClient,
        *,
        daemon_settings: DaemonFactory,
        programs: launcher.Launcher | None = None,
        rng: random.Random | None = None,
        informers: kube_informers.Informers | None = None,
    ) -> None:
        self._settings = settings
        self._client = client
        self._informers = informers
        self._factory = daemon_settings
        self._programs = programs
        self._rng = rng or random.Random()
        self._wanted = Wants()
        self._changed = asyncio.Event()
        self._log = logging.LoggerAdapter(logger, {"node": settings.node_name})
        self.serving: Domain | None = None
        """The CD served now (for tests and diagnostics)."""
        self.daemon: daemon_app.Daemon | None = None
        """The served CD's daemon, while one runs."""
        self.shared: shared.SharedImex | None = None
        """The clique's shared IMEX, while it runs."""
        self._running: plan.Running | None = None
        self._task: asyncio.Task[None] | None = None
        self._declined: Assignment | None = None
        self._warned = ""
        self._awaiting = False
        self._settled = False
        """The Node's newest ask has been read and acted on."""
        self._fresh = True
        """``/readyz`` has not passed yet in this process (see the module docstring)."""
        self._labelled = False
        """Our pod may still carry the CD label of a CD no longer served (a failed unlabel)."""

    async def run(self) -> None:
        """Run until cancelled (see the module docstring).

        Raises:
            ExceptionGroup: a served CD's daemon or the shared IMEX failed, or the probe port
                cannot be bound.
        """
        s = self._settings
        self._log.info(
            "starting: pod %s/%s ip=%s domains=%s",
            s.pod_namespace,
            s.pod_name,
            s.pod_ip,
            s.domains_dir,
        )
        async with asyncio.TaskGroup() as tg:
            if s.metrics_port:
                endpoint = infra_metrics.HttpEndpoint(
                    host=s.pod_ip,
                    port=s.metrics_port,
                    render=self._render,
                    checks={names.DAEMON_HEALTH_PATH: self._ready},
                )
                tasks.spawn(tg, "http-endpoint", endpoint.run, log=logger)
            tasks.spawn(tg, "node-watch", self._follow_node, log=logger)
            tasks.spawn(tg, "serve", self._serve, log=logger)

    # ---- what the node asks -------------------------------------------------------------

    async def _follow_node(self) -> None:
        listed = False
        async for wanted in kubeops.node_wants(
            self._client, self._settings, self._rng, self._informers
        ):
            if wanted != self._wanted or not listed:
                # Node status writes and annotations are frequent; only a change of what it
                # asks wakes us (a CD's channel annotation never restarts the shared IMEX).
                self._wanted = wanted
                self._changed.set()
            listed = True

    # ---- serving ------------------------------------------------------------------------

    async def _serve(self) -> None:
        first = True
        try:
            while True:
                await self._next_change()
                self._settled = False
                wanted = self._wanted
                if wanted.domain != self._declined:
                    self._declined = None  # the node asks anew: look at the next ask afresh
                choice = plan.choose(self._running, wanted, self._declined)
                self._note(choice.warning, wanted)
                if choice.keep:
                    self._settled = True
                    continue
                self._note_awaiting(choice.start is None)
                if self._running is not None:
                    await self._stop()
                if (first or self._labelled) and not isinstance(choice.start, Assignment):
                    # A restarted container may find its pod still labelled from before, and
                    # a stop whose bounded unlabel failed left it labelled: unlabel now (with
                    # retries), or the controller goes on counting us for that CD.
                    await self._label(None, leaving_all=True)
                    self._labelled = False
                first = False
                if isinstance(choice.start, Shared):
                    await self._start_shared(choice.start)
                elif choice.start is not None:
                    await self._start(choice.start)
                self._settled = True
        finally:
            if self._running is not None:
                with contextlib.suppress(Exception):
                    await self._stop()

    def _note(self, warning: str, wanted: Wants) -> None:
        if wanted.shared_without_clique and not warning:
            warning = (
                f"label {sharedimex.SHARED_IMEX_LABEL}={sharedimex.SHARED_IMEX_ON} is set but "
                f"the node has no {names.GPU_CLIQUE_LABEL} label: no shared IMEX to run"
            )
        if warning and warning != self._warned:
            self._log.warning("%s", warning)
        self._warned = warning

    def _note_awaiting(self, idle: bool) -> None:
        """One log line when an idle agent starts waiting for its Node's shared-IMEX label."""
        awaiting = idle and plan.awaits_shared(None, self._wanted, self._settings.shared_imex_eager)
        if awaiting and not self._awaiting:
            self._log.info(
                "not Ready until the node asks for its clique's shared IMEX (clique %r): the "
                "kubelet plugin labels it %s=%s at its start (SHARED_IMEX_EAGER)",
                self._wanted.clique_id,
                sharedimex.SHARED_IMEX_LABEL,
                sharedimex.SHARED_IMEX_ON,
            )
        self._awaiting = awaiting

    async def _next_change(self) -> None:
        """Until the node asks something new; raises what runs' failure meanwhile."""
        task = self._task
        if task is None:
            await self._changed.wait()
        else:
            waiter = asyncio.ensure_future(self._changed.wait())
            try:
                await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            if task.done():
                task.result()  # a failure ends the agent (see _guarded)
                raise errors.ComputeDomainsError(f"{task.get_name()} ended by itself")
        self._changed.clear()

    async def _start(self, wanted: Assignment) -> None:
        uid = wanted.domain_uid
        self._log.info("the node asks for CD %s (clique %r)", uid, wanted.clique_id)
        # The CD's name (its Events, log lines) is read beside the DaemonSet check and our
        # pod's label: only the check must come before the label (the controller registers a
        # labelled pod), so neither read waits for the other or for the label.
        describing = asyncio.ensure_future(
            kubeops.describe(self._client, uid, self._log, self._informers)
        )
        try:
            if await kubeops.has_own_daemonset(self._client, self._settings, uid, self._log):
                # Made while the controller created per-CD DaemonSets: that DaemonSet's pod
                # runs this CD's IMEX here, and a second nvidia-imex must never start beside it.
                self._declined = wanted
                self._log.warning(
                    "CD %s has its own DaemonSet %s (created in perComputeDomain mode): its pod "
                    "serves it; not serving it here",
                    uid,
                    names.daemon_object_name(uid),
                )
                return
            self._declined = None
            unnamed = Domain(
                assignment=wanted,
                name="",
                namespace="",
                domain_dir=self._settings.domains_dir / uid,
            )
            # We label our pod for the CD, clique ID included, so the daemon does not.
            await asyncio.to_thread(_make_dir, unnamed.domain_dir)
            notes = await self._label(uid, self._factory(unnamed).identity.clique_id)
            name, namespace = await describing
        finally:
            describing.cancel()  # still running only on a return or a failure above
        self._labelled = False  # X's labels replace any left from before
        domain = dataclasses.replace(unnamed, name=name, namespace=namespace)
        # Our pod's template says whether the controller writes our entry's status from the
        # daemon's readiness signal (docs/decisions/0025), so both sides read one fact.
        settings = dataclasses.replace(
            self._factory(domain), resident=True, ready_signal=imexsignal.declares(notes)
        )
        daemon = daemon_app.Daemon(
            settings,
            self._client,
            rng=self._rng,
            programs=self._programs,
            informers=self._informers,
        )
        self.serving, self.daemon, self._running = domain, daemon, wanted
        self._log.info(
            "serving CD %s/%s (uid %s, clique %r)", namespace, name, uid, wanted.clique_id
        )
        self._task = asyncio.create_task(
            self._guarded(daemon.run, "the daemon of the served CD"), name=f"daemon-{uid}"
        )

    async def _start_shared(self, wanted: Shared) -> None:
        domain = shared_domain(self._settings, wanted)
        # The names in its nodes.cfg are the clique's own (upstream #1447: no other IMEX
        # domain, another clique's included, may share them).
        settings = dataclasses.replace(
            self._factory(domain), imex_domain=sharedimex.registry_name(wanted.clique_id)
        )
        await asyncio.to_thread(_make_dir, domain.domain_dir)
        imex = shared.SharedImex(
            settings,
            self._client,
            programs=self._programs,
            rng=self._rng,
            informers=self._informers,
        )
        self.shared, self._running = imex, wanted
        self._log.info("running the shared IMEX of clique %r", wanted.clique_id)
        self._task = asyncio.create_task(
            self._guarded(imex.run, "the clique's shared IMEX"), name="shared-imex"
        )

    async def _guarded(self, work: Callable[[], Coroutine[Any, Any, None]], what: str) -> None:
        # What fails ends the agent with its error (the container restarts), as a failing
        # per-CD daemon ends its pod's container.
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except BaseException as err:
            self._log.error("%s failed: %s", what, err)
            raise errors.ComputeDomainsError(f"{what} failed: {err}") from err

    async def _stop(self) -> None:
        running, task = self._running, self._task
        if running is None:
            return
        domain = self.serving
        what = (
            f"the shared IMEX of clique {running.clique_id!r}"
            if isinstance(running, Shared)
            else f"serving CD {domain.namespace}/{domain.name} (uid {running.domain_uid})"
            if domain is not None
            else f"serving CD {running.domain_uid}"
        )
        if isinstance(running, Assignment):
            # Unlabel first: the controller then neither counts us for the CD nor gives our
            # clique entry back while the daemon removes it. Bounded: a stop must end even
            # without the API.
            try:
                async with asyncio.timeout(self._settings.stop_timeout):
                    await self._label(None, leaving=(running.domain_uid,))
            except (TimeoutError, errors.ComputeDomainsError) as err:
                self._labelled = True  # unlabelled after the stop (_serve)
                self._log.warning(
                    "could not unlabel our pod for %s (%s); retrying after the stop",
                    what,
                    err or type(err).__name__,
                )
        if task is not None and not task.done():
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=self._settings.stop_timeout)
            if not done:
                # Its IMEX may still run: starting another would make two on the node. End the
                # agent instead; its process exit takes the IMEX child with it.
                raise errors.ComputeDomainsError(
                    f"{what} did not stop within {self._settings.stop_timeout:.0f}s"
                )
        self.serving, self.daemon, self.shared = None, None, None
        self._running, self._task = None, None
        self._log.info("stopped %s", what)

    async def _label(
        self,
        serving: str | None,
        clique_id: str = "",
        *,
        leaving: tuple[str, ...] = (),
        leaving_all: bool = False,
    ) -> dict[str, str]:
        """Label our pod (``kubeops.label_pod``); the pod's annotations as written.
        ``leaving_all``: also remove every readiness signal the patch shows left on the pod
        (a restarted container's: its killed daemon could not remove its own)."""
        notes = await kubeops.label_pod(
            self._client, self._settings, serving, clique_id, self._rng, self._log, leaving=leaving
        )
        left = labels.signals_left(notes) if leaving_all else []
        if left:
            notes = await kubeops.label_pod(
                self._client, self._settings, serving, clique_id, self._rng, self._log, leaving=left
            )
        return notes

    # ---- probes -------------------------------------------------------------------------

    async def _ready(self) -> bool:
        acting = not self._settled or self._changed.is_set()
        if not self._fresh:
            # A new ask is acted on: what stops was unlabelled first (or its entry goes
            # NotReady), what starts has a new entry, NotReady until its own check passes.
            return acting or await self._running_ready(starting=True)
        if acting:
            return False  # a restarted agent: what its Node asks may not run yet
        if await self._running_ready(starting=False):
            self._fresh = False
            return True
        return False

    async def _running_ready(self, *, starting: bool) -> bool:
        """What runs passes its own IMEX check (``starting``: or has not passed nor exited yet)."""
        daemon, domain = self.daemon, self.serving
        if self.shared is not None:
            check = self.shared.health
        elif daemon is not None and domain is not None:
            if not domain.assignment.clique_id:
                return True
            check = daemon.health
        else:
            # Idle: Ready, unless the Node is about to ask for the shared IMEX (the plugin's
            # eager label) before /readyz first passed: Ready idle would be NotReady for that
            # IMEX's start (issue 28).
            return starting or not plan.awaits_shared(
                self._running, self._wanted, self._settings.shared_imex_eager
            )
        if starting and check.starting:
            return True
        return await check.answer()

    def _render(self) -> bytes:
        if self.shared is not None:
            return self.shared.metrics.render()
        return self.daemon.metrics.render() if self.daemon is not None else b""


def _make_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o755)
