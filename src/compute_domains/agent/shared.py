"""SharedImex: the clique's shared ``nvidia-imex`` on one node (the per-clique scope).

Built by the resident agent while its Node carries ``compute-domains/shared-imex=on`` and a
clique ID; it serves no CD and never looks at one, so attaching or detaching a CD (a channel
annotation on the Node or the registry) neither restarts its IMEX nor signals it. Its settings
are a per-CD daemon's (``DaemonSettings``, built by the agent's factory for the pseudo-domain
``shared-imex``: IMEX files in ``<domains_dir>/shared-imex/``, the same programs, hosts file,
timings), and it runs the per-CD daemon's parts:

1. writes ``imexd.cfg`` (command service bound to the pod IP; a workload's copy beside IMEX's
   own) and the static ``nodes.cfg`` of every slot ``compute-domain-daemon-0000`` … ``<max-1>``
   (``daemon.imexconfig``), atomically;
2. runs, as named guarded tasks: the IMEX supervisor (``daemon.supervisor``, so a crash is
   restarted with backoff, and virtual nodes' in-process launcher works), the peer updater
   (``daemon.peers``: hosts block, first start once our own entry exists, paced SIGUSR1 when
   the registry's peers change), the registration (``registration``: our entry in
   ``shared-imex.<clique>``, its readiness), the own IMEX check (``daemon.health``:
   ``nvidia-imex-ctl -q`` says READY; an IMEX exit makes it fail at once, so our entry goes
   NotReady promptly and Ready again once the restarted IMEX passes), the peer watch
   (``daemon.peerwatch``: the peers our IMEX lost past its bound, written by the registration
   into our ``compute-domains/lost-peers.<index>`` annotation of the registry), and the Event
   recorder (``ImexRestarted`` on the agent's pod).

When a host ``nvidia-imex.service`` holds the node's IMEX session (upstream #524), our IMEX
exits with ``NV_ERR_IN_USE``; the per-CD daemon's ``daemon.session`` watch spots it and posts a
Warning ``ImexSessionInUse`` on the agent's pod (naming the node and the fix; one Event, its
count growing with each retry), and the registration writes the reason into our
``compute-domains/imex-blocked.<index>`` annotation of the registry, where the controller reads
it into the status of every CD our node serves (and posts the Event on each of them); it goes
once IMEX passes its own check. The supervisor keeps its backoff: nothing retries faster.

On cancellation IMEX is stopped (SIGTERM, ``stop_grace``, SIGKILL) while our entry is marked
NotReady (bounded); the entry and its index stay. A failing task ends ``run()`` with its error.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Coroutine
from typing import Any

from lightkube import AsyncClient

from compute_domains.agent import registration
from compute_domains.api import sharedimex
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import (
    cliqueentry,
    events,
    health,
    imexconfig,
    launcher,
    peers,
    peerwatch,
    probe,
    session,
)
from compute_domains.daemon import metrics as daemon_metrics
from compute_domains.daemon import supervisor as imex_supervisor
from compute_domains.daemon.config import DaemonSettings
from compute_domains.infra import tasks
from compute_domains.infra.kube import informers as kube_informers

logger = logging.getLogger(__name__)


class SharedImex:
    """The clique's shared IMEX on our node (see the module docstring).

    Args:
        settings: the daemon settings of the pseudo-domain ``shared-imex`` (validated).
        client: API client (the agent's).
        programs: how ``nvidia-imex`` and its ctl run (child processes when None).
        rng: randomness for backoff jitter.
    """

    def __init__(
        self,
        settings: DaemonSettings,
        client: AsyncClient,
        *,
        programs: launcher.Launcher | None = None,
        rng: random.Random | None = None,
        informers: kube_informers.Informers | None = None,
    ) -> None:
        self._settings = settings
        self._client = client
        self._programs = programs
        self._rng = rng or random.Random()
        ident = settings.identity
        self.clique_id = ident.clique_id
        """The clique whose shared IMEX this is."""
        self._log = logging.LoggerAdapter(logger, {"node": ident.node_name})
        self.metrics = daemon_metrics.DaemonMetrics()
        """The shared IMEX's metrics (own checks, refused registry writes)."""
        own = probe.CheckSettings(
            clique_id=ident.clique_id,
            config_path=settings.imex.config_path,
            ctl_command=settings.imex_ctl_command,
            timeout=settings.health.timeout,
        )
        self.health = health.ImexHealth(
            lambda: probe.check(own, None if programs is None else programs.run),
            settings.health,
            on_change=self._check_changed,
            on_result=self.metrics.imex_check,
        )
        """The own IMEX check (the agent's ``/readyz`` asks it)."""
        self.registration = registration.Registration(
            client,
            ident,
            max_nodes=settings.max_nodes,
            retry=settings.retry,
            on_peers=self._peers_changed,
            meter=self.metrics,
            stop_timeout=settings.deregister_timeout,
            rng=self._rng,
            shared=informers,
        )
        """Our entry in the registry."""
        self.imex: imex_supervisor.Supervisor | None = None
        """The IMEX supervisor, once built."""
        self._updater: peers.PeerUpdater | None = None
        self._watch: peerwatch.PeerWatch | None = None
        self._session = session.SessionWatch(ident.node_name, self._post, on_note=self._blocked)
        self._recorder = events.PodEvents(client, ident)

    async def run(self) -> None:
        """Run until cancelled (see the module docstring).

        Raises:
            ExceptionGroup: a task failed (the registry cannot be written, IMEX cannot be
                respawned, the IMEX files cannot be rendered).
        """
        s = self._settings
        self._log.info(
            "starting the shared IMEX of clique %r: registry %s, ip=%s, max nodes=%d, config=%s",
            self.clique_id,
            self.registration.name,
            s.identity.pod_ip,
            s.max_nodes,
            s.imex.config_path,
        )
        await asyncio.to_thread(self._write_files)  # before IMEX can start
        recorder = self._recorder
        argv = [*s.imex_command, "-c", str(s.imex.config_path)]
        watch = peerwatch.PeerWatch(
            (self._programs or launcher.ProcessLauncher()).run,
            ctl=s.imex_ctl_command,
            config=s.imex.config_path,
            settings=s.peer_loss,
            on_report=self.registration.set_lost,
        )
        self._watch = watch

        def on_output(line: str) -> None:
            self.health.imex_output()
            self._session.on_line(line)  # IMEX's refusal to start (NV_ERR_IN_USE)
            watch.cue(line)  # IMEX's disconnect lines cue the peer watch

        def on_restart(exit_: imex_supervisor.ChildExit) -> None:
            self.health.imex_exited()  # our entry goes NotReady now, not at the next check
            self._session.on_exit()  # before the restart Event: the cause first
            recorder.post(
                events.WARNING,
                events.IMEX_RESTARTED,
                f"the shared nvidia-imex of clique {self.clique_id} exited with status "
                f"{exit_.returncode} after {exit_.uptime:.1f}s; restart #{exit_.restarts} in "
                f"{exit_.restart_delay:.1f}s",
            )

        def on_started() -> None:
            self._log.info("started %s", " ".join(argv))
            self.health.imex_started()

        imex = imex_supervisor.Supervisor(
            argv,
            settings=s.supervisor,
            rng=self._rng,
            on_restart=on_restart,
            on_output=on_output,
            programs=self._programs,
        )
        self.imex = imex
        self._updater = peers.PeerUpdater(
            s.peers,
            imex,
            max_nodes=s.max_nodes,
            domain=s.imex_domain_identity,
            on_started=on_started,
        )
        work: dict[str, Coroutine[Any, Any, None]] = {
            "shared-imex-supervisor": imex.run(),
            "shared-peer-updater": self._updater.run(),
            "shared-registration": self.registration.run(),
            "shared-imex-check": self.health.run(),
            "shared-peer-watch": watch.run(),
            "shared-events": recorder.run(),
        }
        async with asyncio.TaskGroup() as tg:
            for name, coro in work.items():
                tasks.spawn(tg, name, coro, log=logger)

    def _write_files(self) -> None:
        s = self._settings
        imexconfig.write_imex_config(s.imex, pod_ip=s.identity.pod_ip)
        # The clique's own names (``imex_domain`` is ``shared-imex.<cliqueID>``): no other IMEX
        # domain shares them, so no other domain's message can pass for a peer's (#1447).
        nodes = imexconfig.dns_nodes_config(s.max_nodes, s.imex_domain_identity)
        imexconfig.write_nodes_config(s.imex, nodes)
        self._log.info(
            "wrote %s and %s (%d DNS names)",
            s.imex.config_path,
            s.imex.nodes_config_path,
            s.max_nodes,
        )

    def _peers_changed(self, mapping: cliqueentry.PeerMapping) -> None:
        if self._updater is not None:
            self._updater.update(mapping)
        if self._watch is not None:
            self._watch.set_peers(self.registration.index, mapping.keys())

    def _check_changed(self, ok: bool) -> None:
        if ok:
            self._session.imex_ok()  # the session is ours: the blocked note goes
        self.registration.set_status(Readiness.READY if ok else Readiness.NOT_READY)

    def _post(self, message: str) -> None:
        """The session-in-use Event, on the agent's pod (the controller posts it on the CDs:
        only it knows which CDs our node serves)."""
        self._recorder.post(events.WARNING, events.IMEX_SESSION_IN_USE, message)

    def _blocked(self, note: str) -> None:
        blocked = (
            sharedimex.Blocked(reason=events.IMEX_SESSION_IN_USE, message=note) if note else None
        )
        self.registration.set_blocked(blocked)
