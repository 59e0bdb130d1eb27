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
   for; the shared IMEX comes before a per-domain CD when both are asked of an idle agent),
   through a ``runner.Runner``: a per-domain CD's ``daemon.app.Daemon`` (not for a CD with its
   own per-CD DaemonSet), with our pod labelled for it, or the clique's shared IMEX
   (``shared.SharedImex``). Its module docstring says how each starts and stops; either stop
   is bounded by ``stop_timeout``: one that does not end in time ends the agent, so a second
   IMEX never starts beside a stuck one.

Invariant: at most one daemon or shared IMEX, so at most one ``nvidia-imex``, runs on the node;
a change stops the old one before the new one starts. One that fails ends ``run()`` with its
error (the container restarts, as a per-CD daemon pod's would); on cancellation (SIGTERM) what
runs is stopped as above, then ``run()`` ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

from lightkube import AsyncClient

from compute_domains.agent import kubeops, plan, runner, shared
from compute_domains.agent.config import (
    AgentSettings,
    Assignment,
    DaemonFactory,
    Domain,
    Shared,
    Wants,
)
from compute_domains.api import names, sharedimex
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
        self._rng = rng or random.Random()
        self._wanted = Wants()
        self._changed = asyncio.Event()
        self._log = logging.LoggerAdapter(logger, {"node": settings.node_name})
        self._runner = runner.Runner(
            settings,
            client,
            factory=daemon_settings,
            programs=programs,
            rng=self._rng,
            informers=informers,
            log=self._log,  # its records keep this module's logger name and the node
        )
        """What runs now, its start and stop."""
        self._warned = ""
        self._awaiting = False
        self._settled = False
        """The Node's newest ask has been read and acted on."""
        self._fresh = True
        """``/readyz`` has not passed yet in this process (see the module docstring)."""

    @property
    def serving(self) -> Domain | None:
        """The CD served now (for tests and diagnostics)."""
        return self._runner.serving

    @property
    def daemon(self) -> daemon_app.Daemon | None:
        """The served CD's daemon, while one runs."""
        return self._runner.daemon

    @property
    def shared(self) -> shared.SharedImex | None:
        """The clique's shared IMEX, while it runs."""
        return self._runner.shared

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
                if wanted.domain != self._runner.declined:
                    self._runner.declined = None  # the node asks anew: look at the next ask afresh
                choice = plan.choose(self._runner.running, wanted, self._runner.declined)
                self._note(choice.warning, wanted)
                if choice.keep:
                    self._settled = True
                    continue
                self._note_awaiting(choice.start is None)
                if self._runner.running is not None:
                    await self._runner.stop()
                if (first or self._runner.labelled) and not isinstance(choice.start, Assignment):
                    # A restarted container may find its pod still labelled from before, and
                    # a stop whose bounded unlabel failed left it labelled: unlabel now (with
                    # retries), or the controller goes on counting us for that CD.
                    await self._runner.label(None, leaving_all=True)
                    self._runner.labelled = False
                first = False
                if isinstance(choice.start, Shared):
                    await self._runner.start_shared(choice.start)
                elif choice.start is not None:
                    await self._runner.start(choice.start)
                self._settled = True
        finally:
            if self._runner.running is not None:
                with contextlib.suppress(Exception):
                    await self._runner.stop()

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
        task = self._runner.task
        if task is None:
            await self._changed.wait()
        else:
            waiter = asyncio.ensure_future(self._changed.wait())
            try:
                await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            if task.done():
                task.result()  # a failure ends the agent (see runner.Runner._guarded)
                raise errors.ComputeDomainsError(f"{task.get_name()} ended by itself")
        self._changed.clear()

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
                self._runner.running, self._wanted, self._settings.shared_imex_eager
            )
        if starting and check.starting:
            return True
        return await check.answer()

    def _render(self) -> bytes:
        if self.shared is not None:
            return self.shared.metrics.render()
        return self.daemon.metrics.render() if self.daemon is not None else b""
