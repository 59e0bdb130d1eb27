"""Compose the daemon: serve its probes, label the pod, write the IMEX files, then run
membership, peers, IMEX and its own IMEX check.

``Daemon.run()`` serves, for its whole life and when it has a metrics port, the probe and
metrics endpoint (``/readyz`` from ``health``, ``/metrics`` from ``daemon.metrics``, on the pod
IP) and meanwhile does, in order:

1. with no clique ID (no multi-node NVLink on this node): label our pod with an empty clique ID
   (a refusal is fatal), nothing else; wait to be cancelled (``/readyz`` passes at once, the
   controller reports the node from the pod);
2. render ``imexd.cfg`` (command service bound to the pod IP) and the static ``nodes.cfg``
   (``compute-domain-daemon-<infix>-0000`` … ``<max-1>``, the infix the IMEX domain's: unique
   on the network per domain, upstream #1447), both atomically;
3. run, as named guarded tasks of one TaskGroup: the pod labelling (its clique ID; a refusal is
   fatal), the IMEX supervisor, the peer updater (hosts block, first start, paced SIGUSR1), the
   clique membership (register, follow, report readiness), the own IMEX check, the peer
   watch (which peers our IMEX lost, written into the clique by the membership), our pod's
   readiness watch, and the Event recorder. The label is our request for a clique entry: the
   controller assigns our index and writes the entry (docs/decisions/0009), which the
   membership, following the clique meanwhile, sees arrive; only what the first report needs
   waits for anything.

Run by a resident agent (``DaemonSettings.resident``), steps 1 and 3 leave the pod's labels to
the agent (it set them before starting us), and our entry reports the own IMEX check alone: no
watch of the pod's readiness (the settings say why). Where the agent's pod declares the IMEX
readiness signal (``DaemonSettings.ready_signal``), that check is written as the signal on the
pod (``podsignal``) instead, and the controller writes our entry's status from it
(docs/decisions/0025).

Each start-up step is timed (``steps``). Any task failing cancels the others, and the error
propagates (the container restarts). On cancellation (SIGTERM) the IMEX process is stopped
(SIGTERM, bounded wait, SIGKILL) while, at the same time, our clique entry is removed (bounded);
then ``run()`` ends.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Coroutine
from typing import Any

from lightkube import AsyncClient

from compute_domains.api import names
from compute_domains.api.clique import CliqueDaemon
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import (
    cliqueentry,
    events,
    health,
    imexconfig,
    launcher,
    membership,
    peers,
    peerwatch,
    podsignal,
    probe,
    readiness,
    session,
    steps,
    supervisor,
)
from compute_domains.daemon import metrics as daemon_metrics
from compute_domains.daemon.config import DaemonSettings
from compute_domains.infra import metrics as infra_metrics
from compute_domains.infra import tasks
from compute_domains.infra.kube import informers as kube_informers

logger = logging.getLogger(__name__)


class Daemon:
    """One ComputeDomain daemon (one per CD per node); see the module docstring.

    Args:
        settings: validated settings.
        client: API client (the pod's ServiceAccount).
        rng: randomness for backoff jitter (tests pass a seeded one).
        metrics: this process's metrics (a fresh registry when not given).
        timeline: the start-up steps (counted from the first step when not given).
        programs: how ``nvidia-imex`` and the ctl check run (child processes when not given;
            the simulator's virtual nodes pass an in-process launcher).
    """

    def __init__(
        self,
        settings: DaemonSettings,
        client: AsyncClient,
        *,
        rng: random.Random | None = None,
        metrics: daemon_metrics.DaemonMetrics | None = None,
        timeline: steps.Steps | None = None,
        programs: launcher.Launcher | None = None,
        informers: kube_informers.Informers | None = None,
    ) -> None:
        self._settings = settings
        self._programs = programs
        self._informers = informers
        self._client = client
        self._rng = rng or random.Random()
        self._log = logging.LoggerAdapter(
            logger, {"cd": settings.identity.cd, "node": settings.identity.node_name}
        )
        self.metrics = metrics or daemon_metrics.DaemonMetrics()
        self.steps = timeline or steps.Steps(started_at=None, on_step=self.metrics.step)
        own = probe.CheckSettings(
            clique_id=settings.identity.clique_id,
            config_path=settings.imex.config_path,
            ctl_command=settings.imex_ctl_command,
            timeout=settings.health.timeout,
        )
        self.health = health.ImexHealth(
            lambda: probe.check(own, None if programs is None else programs.run),
            settings.health,
            on_change=self._own_check_changed,
            on_result=self.metrics.imex_check,
        )
        """The daemon's own IMEX check, which its probes ask."""
        self.http: infra_metrics.HttpEndpoint | None = None
        """The probe and metrics endpoint, once built."""
        self.imex: supervisor.Supervisor | None = None
        """The IMEX supervisor, once built (for tests and diagnostics)."""
        self.membership: membership.Membership | None = None
        """The clique membership, once built."""
        self._pod: readiness.PodReadiness | None = None
        self._session: session.SessionWatch | None = None
        self.signal: podsignal.PodSignal | None = None
        """Our IMEX readiness signal on our pod, which the controller writes our entry's status
        from (a resident daemon whose pod declares it: ``DaemonSettings.ready_signal``)."""
        if settings.resident and settings.ready_signal:
            # Made now: its earliest stamp counts from our start (api.imexsignal).
            self.signal = podsignal.PodSignal(
                client,
                settings.identity,
                retry=settings.retry,
                remove_timeout=settings.deregister_timeout,
                rng=self._rng,
            )

    async def run(self) -> None:
        """Run until cancelled (see the module docstring).

        Raises:
            ExceptionGroup: an essential task failed; among the causes: ``PermanentError`` (our
                pod could not be labelled), ``ConfigError`` (the IMEX files cannot be rendered),
                ``OSError`` (the probe port cannot be bound).
        """
        s = self._settings
        ident = s.identity
        self._log.info(
            "starting: pod %s/%s ip=%s clique=%r cd uid=%s max nodes=%d imex config=%s hosts=%s",
            ident.pod_namespace,
            ident.pod_name,
            ident.pod_ip,
            ident.clique_id,
            ident.domain_uid,
            s.max_nodes,
            s.imex.config_path,
            s.peers.hosts_file,
        )
        async with asyncio.TaskGroup() as tg:
            if s.metrics_port:
                # Without a clique ID there is no IMEX to ask: Ready at once (as `daemon check`).
                answer = self.health.answer if ident.has_clique else infra_metrics.always_ok
                checks: dict[str, infra_metrics.Check] = {names.DAEMON_HEALTH_PATH: answer}
                self.http = infra_metrics.HttpEndpoint(
                    host=ident.pod_ip,
                    port=s.metrics_port,
                    render=self.metrics.render,
                    checks=checks,
                )
                tasks.spawn(tg, "http-endpoint", self.http.run, log=logger)
            tasks.spawn(tg, "daemon", self._main, log=logger)

    async def _main(self) -> None:
        s = self._settings
        ident = s.identity
        if not ident.has_clique:
            await self._label()
            self._log.info("no clique ID: this node has no multi-node NVLink; idling until stopped")
            await asyncio.Event().wait()  # only cancellation ends this
        await asyncio.to_thread(self._write_imex_files)  # before IMEX can start
        await self._run_tasks()

    async def _label(self) -> None:
        """Label our pod with its clique ID (for a fabric node: our request for an index); a
        resident agent did that already, with the CD label (``DaemonSettings.resident``)."""
        s = self._settings
        if not s.resident:
            await readiness.label_pod(self._client, s.identity, retry=s.retry, rng=self._rng)
        self.steps.mark(steps.POD_LABELLED)

    def _write_imex_files(self) -> None:
        s = self._settings
        imexconfig.write_imex_config(s.imex, pod_ip=s.identity.pod_ip)
        domain = s.imex_domain_identity
        nodes = imexconfig.dns_nodes_config(s.max_nodes, domain)
        written = imexconfig.write_nodes_config(s.imex, nodes)
        self._log.info(
            "wrote %s and %s (%d DNS names from %s%s)",
            s.imex.config_path,
            s.imex.nodes_config_path,
            s.max_nodes,
            names.imex_dns_name(0, domain),
            "" if written else ", unchanged",
        )

    async def _run_tasks(self) -> None:
        s = self._settings
        ident = s.identity
        recorder = events.PodEvents(self._client, ident)

        def post_restart(exit_: supervisor.ChildExit) -> None:
            recorder.post(
                events.WARNING,
                events.IMEX_RESTARTED,
                f"nvidia-imex exited with status {exit_.returncode} after {exit_.uptime:.1f}s; "
                f"restart #{exit_.restarts} in {exit_.restart_delay:.1f}s",
            )

        def post_in_use(message: str) -> None:
            for on_domain in (False, True):
                recorder.post(
                    events.WARNING, events.IMEX_SESSION_IN_USE, message, on_domain=on_domain
                )

        in_use = session.SessionWatch(ident.node_name, post_in_use)
        self._session = in_use

        def on_restart(exit_: supervisor.ChildExit) -> None:
            self.health.imex_exited()
            in_use.on_exit()  # before the restart Event: the cause first
            post_restart(exit_)

        def on_started() -> None:
            self._log.info("started %s", " ".join(argv))
            self.steps.mark(steps.IMEX_STARTED)
            self.health.imex_started()

        watch = peerwatch.PeerWatch(
            (self._programs or launcher.ProcessLauncher()).run,
            ctl=s.imex_ctl_command,
            config=s.imex.config_path,
            settings=s.peer_loss,
            on_report=lambda lost: member.set_lost(lost),
        )

        def on_output(line: str) -> None:
            self.health.imex_output()
            in_use.on_line(line)  # IMEX's refusal to start (NV_ERR_IN_USE)
            watch.cue(line)  # IMEX's disconnect lines cue the peer watch

        argv = [*s.imex_command, "-c", str(s.imex.config_path)]
        imex = supervisor.Supervisor(
            argv,
            settings=s.supervisor,
            rng=self._rng,
            on_restart=on_restart,
            on_output=on_output,
            programs=self._programs,
        )
        updater = peers.PeerUpdater(
            s.peers,
            imex,
            max_nodes=s.max_nodes,
            domain=s.imex_domain_identity,
            on_started=on_started,
        )

        def on_peers(mapping: cliqueentry.PeerMapping) -> None:
            updater.update(mapping)
            watch.set_peers(member.index, mapping.keys())

        member = membership.Membership(
            self._client,
            ident,
            max_nodes=s.max_nodes,
            retry=s.retry,
            recorder=recorder,
            on_peers=on_peers,
            deregister_timeout=s.deregister_timeout,
            rng=self._rng,
            meter=self.metrics,
            on_entry=self._entry_seen,
            shared=self._informers,
            reports_status=self.signal is None,
        )

        async def label() -> None:
            # The label asks the controller for our clique entry; the membership, following
            # the clique meanwhile, sees it arrive.
            await self._label()
            await asyncio.Event().wait()  # a guarded task ends only by cancellation

        def on_readiness(value: Readiness) -> None:
            if value is Readiness.READY:
                self.steps.mark(steps.POD_READY)
            member.set_status(value)

        self.imex, self.membership = imex, member
        work: dict[str, Coroutine[Any, Any, None]] = {
            "label-pod": label(),
            "imex-supervisor": imex.run(),
            "peer-updater": updater.run(),
            "clique-membership": member.run(),
            "own-imex-check": self.health.run(),
            "peer-watch": watch.run(),
            "events": recorder.run(),
            "session-note": in_use.run(self._client, ident, retry=s.retry, rng=self._rng),
        }
        if self.signal is not None:
            work["ready-signal"] = self.signal.run()
        if not s.resident:
            # A per-CD pod: our entry follows its Ready condition, gated by our own check.
            self._pod = readiness.PodReadiness(
                self._client,
                ident,
                on_change=on_readiness,
                retry=s.retry,
                own_check=True,
                shared=self._informers,
            )
            work["pod-readiness"] = self._pod.run()
        async with asyncio.TaskGroup() as tg:
            for name, coro in work.items():
                tasks.spawn(tg, name, coro, log=logger)

    def _own_check_changed(self, ok: bool) -> None:
        if ok:
            self.steps.mark(steps.IMEX_READY)
            if self._session is not None:
                self._session.imex_ok()
        if self._pod is not None:
            self._pod.set_own(ok)
        elif self.signal is not None:
            # Our entry's status is the controller's, from this signal (docs/decisions/0025).
            self.signal.set(ok)
        elif self._settings.resident and self.membership is not None:
            # A resident agent's daemon: our entry is our own check (DaemonSettings.resident).
            self.membership.set_status(Readiness.READY if ok else Readiness.NOT_READY)

    def _entry_seen(self, entry: CliqueDaemon) -> None:
        self.steps.mark(steps.REGISTERED)
        if entry.status is Readiness.READY:
            self.steps.mark(steps.READY_REPORTED)
