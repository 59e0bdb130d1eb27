"""Compose the daemon: label the pod, write the IMEX files, then run membership, peers and IMEX.

``Daemon.run()`` does, in order:

1. label our pod with its clique ID (the value may be empty); a refusal is fatal;
2. with no clique ID (no multi-node NVLink on this node): nothing else; wait to be cancelled
   (``check`` passes at once, the controller reports the node from the pod);
3. render ``imexd.cfg`` (command service bound to the pod IP) and the static ``nodes.cfg``
   (``compute-domain-daemon-0000`` … ``<max-1>``), both atomically;
4. run, as named guarded tasks of one TaskGroup: the IMEX supervisor, the peer updater (hosts
   block, first start, paced SIGUSR1), the clique membership (register, follow, report
   readiness), our pod's readiness watch, the Event recorder, and (with a metrics port) the
   ``/metrics`` endpoint on the pod IP (``daemon.metrics``).

Any task failing cancels the others, and the error propagates (the container restarts). On
cancellation (SIGTERM) the IMEX process is stopped (SIGTERM, bounded wait, SIGKILL) while, at
the same time, our clique entry is removed (bounded); then ``run()`` ends.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Coroutine
from typing import Any

from lightkube import AsyncClient

from compute_domains.daemon import (
    events,
    imexconfig,
    membership,
    metrics,
    peers,
    probe,
    readiness,
    supervisor,
)
from compute_domains.daemon.config import DaemonSettings
from compute_domains.infra import metrics as infra_metrics
from compute_domains.infra import tasks

logger = logging.getLogger(__name__)


class Daemon:
    """One ComputeDomain daemon (one per CD per node); see the module docstring.

    Args:
        settings: validated settings.
        client: API client (the pod's ServiceAccount).
        rng: randomness for backoff jitter (tests pass a seeded one).
    """

    def __init__(
        self, settings: DaemonSettings, client: AsyncClient, *, rng: random.Random | None = None
    ) -> None:
        self._settings = settings
        self._client = client
        self._rng = rng or random.Random()
        self._log = logging.LoggerAdapter(
            logger, {"cd": settings.identity.cd, "node": settings.identity.node_name}
        )
        self.imex: supervisor.Supervisor | None = None
        """The IMEX supervisor, once built (for tests and diagnostics)."""
        self.membership: membership.Membership | None = None
        """The clique membership, once built."""
        self.metrics = metrics.DaemonMetrics()
        """This daemon's metrics (its own registry)."""
        self._controller_ref: dict[str, str] | None = None

    async def run(self) -> None:
        """Run until cancelled (see the module docstring).

        Raises:
            PermanentError: our pod could not be labelled.
            ConfigError: the IMEX files cannot be rendered.
            ExceptionGroup: an essential task failed.
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
        self._controller_ref = await readiness.label_pod(
            self._client, ident, retry=s.retry, rng=self._rng
        )
        if not ident.has_clique:
            self._log.info("no clique ID: this node has no multi-node NVLink; idling until stopped")
            await asyncio.Event().wait()  # only cancellation ends this
        await asyncio.to_thread(self._write_imex_files)
        await self._run_tasks()

    def _write_imex_files(self) -> None:
        s = self._settings
        imexconfig.write_imex_config(s.imex, pod_ip=s.identity.pod_ip)
        written = imexconfig.write_nodes_config(s.imex, imexconfig.dns_nodes_config(s.max_nodes))
        self._log.info(
            "wrote %s and %s (%d DNS names%s)",
            s.imex.config_path,
            s.imex.nodes_config_path,
            s.max_nodes,
            "" if written else ", unchanged",
        )

    async def _run_tasks(self) -> None:
        s = self._settings
        ident = s.identity
        recorder = events.PodEvents(self._client, ident)

        def on_restart(exit_: supervisor.ChildExit) -> None:
            recorder.post(
                events.WARNING,
                events.IMEX_RESTARTED,
                f"nvidia-imex exited with status {exit_.returncode} after {exit_.uptime:.1f}s; "
                f"restart #{exit_.restarts} in {exit_.restart_delay:.1f}s",
            )

        argv = [*s.imex_command, "-c", str(s.imex.config_path)]
        imex = supervisor.Supervisor(
            argv, settings=s.supervisor, rng=self._rng, on_restart=on_restart
        )
        updater = peers.PeerUpdater(
            s.peers,
            imex,
            max_nodes=s.max_nodes,
            on_started=lambda: self._log.info("started %s", " ".join(argv)),
        )
        member = membership.Membership(
            self._client,
            ident,
            max_nodes=s.max_nodes,
            retry=s.retry,
            recorder=recorder,
            on_peers=updater.update,
            deregister_timeout=s.deregister_timeout,
            rng=self._rng,
            co_owner=self._controller_ref,
            meter=self.metrics,
        )
        own = probe.CheckSettings(
            clique_id=ident.clique_id,
            config_path=s.imex.config_path,
            ctl_command=s.imex_ctl_command,
        )
        pod = readiness.PodReadiness(
            self._client,
            ident,
            on_change=member.set_status,
            retry=s.retry,
            own_check=lambda: probe.check(own),
        )
        self.imex, self.membership = imex, member
        work: dict[str, Coroutine[Any, Any, None]] = {
            "imex-supervisor": imex.run(),
            "peer-updater": updater.run(),
            "clique-membership": member.run(),
            "pod-readiness": pod.run(),
            "events": recorder.run(),
        }
        if s.metrics_port:
            endpoint = infra_metrics.HttpEndpoint(
                host=ident.pod_ip, port=s.metrics_port, render=self.metrics.render, checks={}
            )
            work["metrics-http"] = endpoint.run()
        async with asyncio.TaskGroup() as tg:
            for name, coro in work.items():
                tasks.spawn(tg, name, coro, log=logger)
