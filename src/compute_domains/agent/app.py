"""ResidentAgent: follow our Node's CD label and run that CD's daemon in-process while it is set.

``ResidentAgent.run()`` serves, when it has a metrics port, ``/readyz`` (the served CD's daemon's
own IMEX check; passing while no CD is served or the node has no clique ID) and ``/metrics`` (the
served daemon's), and meanwhile:

1. follows our Node by watch (``infra.kube.watch``: list, then watch from its version, re-list on
   410, back off on errors; no polling) and keeps the latest :class:`Assignment` it asks for
   (``labels.assignment_of``);
2. serves one CD at a time, the latest wanted one, unless that CD ``X`` has its own per-CD
   DaemonSet (made before the switch to resident agents: its pod serves ``X``, and a second
   ``nvidia-imex`` must not start; the agent logs that and leaves ``X`` alone). To serve ``X``:
   read its name and namespace (log lines), label our pod
   ``resource.nvidia.com/computeDomain=X``, then run ``daemon.app.Daemon`` with the settings
   the CLI's factory builds for ``X`` as a task: it writes ``X``'s IMEX files in the per-CD
   folder, labels our pod with the clique ID (asking the controller for a clique slot), starts
   ``nvidia-imex`` and registers, exactly as ``X``'s own daemon pod would. To stop: remove both
   labels from our pod first (so the controller no longer counts us for ``X`` and will not
   give the entry back), then cancel the daemon, which stops IMEX and removes our clique entry
   (bounded by ``stop_timeout``; a daemon that does not stop in time ends the agent, so a
   second IMEX never starts beside a stuck one).

Invariant: at most one daemon, so at most one ``nvidia-imex``, runs on the node; a change of CD
stops the old daemon before the new one starts. A daemon that fails ends ``run()`` with its
error (the container restarts, as a per-CD daemon pod's would); on cancellation (SIGTERM) the
served CD is stopped as above, then ``run()`` ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from pathlib import Path

import httpx2 as httpx
from lightkube import ALL_NS, AsyncClient
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from compute_domains.agent import labels
from compute_domains.agent.config import AgentSettings, Assignment, DaemonFactory, Domain
from compute_domains.api import names
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.daemon import app as daemon_app
from compute_domains.daemon import kubeio, launcher
from compute_domains.infra import errors, tasks
from compute_domains.infra import metrics as infra_metrics
from compute_domains.infra.kube import watch

logger = logging.getLogger(__name__)


class ResidentAgent:
    """One node's resident IMEX agent (see the module docstring).

    Args:
        settings: the agent's settings.
        client: API client (the agent pod's ServiceAccount).
        daemon_settings: builds the daemon settings for one CD (``cli.daemon``'s builder).
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
    ) -> None:
        self._settings = settings
        self._client = client
        self._factory = daemon_settings
        self._programs = programs
        self._rng = rng or random.Random()
        self._wanted: Assignment | None = None
        self._changed = asyncio.Event()
        self._log = logging.LoggerAdapter(logger, {"node": settings.node_name})
        self.serving: Domain | None = None
        """The CD served now (for tests and diagnostics)."""
        self.daemon: daemon_app.Daemon | None = None
        """The served CD's daemon, while one runs."""
        self._task: asyncio.Task[None] | None = None
        self._declined: Assignment | None = None

    async def run(self) -> None:
        """Run until cancelled (see the module docstring).

        Raises:
            ExceptionGroup: a served CD's daemon failed, or the probe port cannot be bound.
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
        s = self._settings
        listed = False
        async for item in watch.stream(
            self._client,
            Node,
            name=f"Node {s.node_name}",
            namespace=None,
            fields={"metadata.name": s.node_name},
            retry=s.retry,
            rng=self._rng,
        ):
            if isinstance(item, watch.Listed):
                node = item.objects[0] if item.objects else None
            else:
                node = None if item.type == "DELETED" else item.obj
            wanted = labels.assignment_of(labels.node_labels(node))
            if wanted != self._wanted or not listed:
                # Node status writes are frequent; only a change of what it asks wakes us.
                self._wanted = wanted
                self._changed.set()
            listed = True

    # ---- serving ------------------------------------------------------------------------

    async def _serve(self) -> None:
        first = True
        try:
            while True:
                await self._next_change()
                wanted = self._wanted
                if wanted != self._declined:
                    self._declined = None  # the node asks anew: look at the next ask afresh
                current = self.serving.assignment if self.serving is not None else None
                if wanted == current and not first:
                    continue
                if self.serving is not None:
                    await self._stop()
                elif first and wanted is None:
                    # A restarted container may find its pod still labelled from before.
                    await self._label(None)
                first = False
                if wanted is not None and wanted != self._declined:
                    await self._start(wanted)
        finally:
            if self.serving is not None:
                with contextlib.suppress(Exception):
                    await self._stop()

    async def _next_change(self) -> None:
        """Until the node asks something new; raises the served daemon's failure meanwhile."""
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
                raise errors.ComputeDomainsError("the served CD's daemon ended by itself")
        self._changed.clear()

    async def _start(self, wanted: Assignment) -> None:
        if await self._has_own_daemonset(wanted.domain_uid):
            # Made while the controller created per-CD DaemonSets: that DaemonSet's pod runs
            # this CD's IMEX here, and a second nvidia-imex must never start beside it.
            self._declined = wanted
            self._log.warning(
                "CD %s has its own DaemonSet %s (created in perComputeDomain mode): its pod "
                "serves it; not serving it here",
                wanted.domain_uid,
                names.daemon_object_name(wanted.domain_uid),
            )
            return
        self._declined = None
        name, namespace = await self._describe(wanted.domain_uid)
        domain = Domain(
            assignment=wanted,
            name=name,
            namespace=namespace,
            domain_dir=self._settings.domains_dir / wanted.domain_uid,
        )
        settings = self._factory(domain)
        await asyncio.to_thread(_make_dir, domain.domain_dir)
        await self._label(wanted.domain_uid)
        daemon = daemon_app.Daemon(settings, self._client, rng=self._rng, programs=self._programs)
        self.serving, self.daemon = domain, daemon
        self._log.info(
            "serving CD %s/%s (uid %s, clique %r)",
            namespace,
            name,
            wanted.domain_uid,
            wanted.clique_id,
        )
        self._task = asyncio.create_task(self._guarded(daemon), name=f"daemon-{wanted.domain_uid}")

    async def _guarded(self, daemon: daemon_app.Daemon) -> None:
        # A daemon that fails ends the agent with its error (the container restarts), as a
        # failing per-CD daemon ends its pod's container.
        try:
            await daemon.run()
        except asyncio.CancelledError:
            raise
        except BaseException as err:
            self._log.error("the daemon of the served CD failed: %s", err)
            raise errors.ComputeDomainsError(f"daemon failed: {err}") from err

    async def _stop(self) -> None:
        domain, task = self.serving, self._task
        if domain is None:
            return
        uid = domain.assignment.domain_uid
        # Unlabel first: the controller then neither counts us for the CD nor gives our clique
        # entry back while the daemon removes it. Bounded: a stop must end even without the API.
        try:
            await asyncio.wait_for(self._label(None), self._settings.stop_timeout)
        except (TimeoutError, errors.ComputeDomainsError) as err:
            self._log.warning("could not unlabel our pod for CD %s: %s", uid, err)
        if task is not None and not task.done():
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=self._settings.stop_timeout)
            if not done:
                # Its IMEX may still run: starting another would make two on the node. End the
                # agent instead; its process exit takes the IMEX child with it.
                raise errors.ComputeDomainsError(
                    f"the daemon of CD {uid} did not stop within {self._settings.stop_timeout:.0f}s"
                )
        self.serving, self.daemon, self._task = None, None, None
        self._log.info("stopped serving CD %s/%s (uid %s)", domain.namespace, domain.name, uid)

    async def _has_own_daemonset(self, domain_uid: str) -> bool:
        name = names.daemon_object_name(domain_uid)
        try:
            await self._client.get(DaemonSet, name, namespace=self._settings.pod_namespace)
        except (httpx.HTTPError, OSError) as err:
            if kubeio.status_code(err) != 404:
                self._log.warning("cannot read DaemonSet %s (%s); serving the CD", name, err)
            return False
        return True

    async def _describe(self, domain_uid: str) -> tuple[str, str]:
        """The CD's name and namespace ("", "" when it cannot be read; logs only)."""
        try:
            async for cd in self._client.list(ComputeDomainResource, namespace=ALL_NS):
                meta = cd.metadata
                if meta is not None and meta.uid == domain_uid:
                    return meta.name or "", meta.namespace or ""
        except (httpx.HTTPError, OSError) as err:
            self._log.info("cannot read ComputeDomain %s: %s", domain_uid, err)
        return "", ""

    async def _label(self, serving: str | None) -> None:
        """Patch our pod's labels for ``serving`` (None: unlabel); temporary failures retry."""
        s = self._settings
        attempt = 0
        while True:
            try:
                await self._client.patch(
                    Pod,
                    s.pod_name,
                    labels.pod_label_patch(serving),
                    namespace=s.pod_namespace,
                    patch_type=PatchType.MERGE,
                )
                return
            except (httpx.HTTPError, OSError) as err:
                classified = kubeio.classify(err, f"label pod {s.pod_namespace}/{s.pod_name}")
                if isinstance(classified, errors.PermanentError):
                    raise classified from err
                delay = s.retry.delay(attempt, self._rng)
                self._log.info("%s; retrying in %.2fs", classified, delay)
                attempt += 1
                await asyncio.sleep(delay)

    # ---- probes -------------------------------------------------------------------------

    async def _ready(self) -> bool:
        daemon, domain = self.daemon, self.serving
        if daemon is None or domain is None or not domain.assignment.clique_id:
            return True
        return await daemon.health.answer()

    def _render(self) -> bytes:
        return self.daemon.metrics.render() if self.daemon is not None else b""


def _make_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o755)
