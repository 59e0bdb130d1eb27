"""What a resident agent runs on its node, one at a time: a per-domain CD's daemon or the
clique's shared IMEX; starting it, stopping it, and our pod's labels for it.

``ResidentAgent`` (``agent.app``) decides what runs (``plan.choose``); a :class:`Runner` holds
what runs now and does the start and the stop:

* A per-domain CD ``X`` is not served when it has its own per-CD DaemonSet (made before the
  switch to resident agents: its pod serves ``X``, and a second ``nvidia-imex`` must not
  start; the runner logs that and leaves ``X`` alone, ``declined``). To serve ``X``: read its
  name and namespace (log lines; read together with the DaemonSet check), label our pod
  ``resource.nvidia.com/computeDomain=X`` and with the clique ID (asking the controller for a
  clique slot; one patch), then run ``daemon.app.Daemon`` with the settings the CLI's factory
  builds for ``X``, marked ``resident``, as a task: it writes ``X``'s IMEX files in the per-CD
  folder, starts ``nvidia-imex`` and registers as ``X``'s own daemon pod would, except that it
  leaves the pod's labels to us and reports its entry Ready from its own IMEX check, not from
  our pod's ``Ready`` condition (``DaemonSettings.resident`` says why).
* To stop: remove both labels from our pod first (so the controller no longer counts us for
  ``X`` and will not give the entry back), then cancel the daemon, which stops IMEX and removes
  our clique entry; an unlabel that did not end within the bound leaves ``labelled`` set, and
  the agent unlabels again, with retries, once the daemon stopped (unless the next CD's label
  replaces it).
* The shared IMEX is ``shared.SharedImex``, run with the factory's settings for the
  pseudo-domain ``config.SHARED_FOLDER`` (files in ``<domains_dir>/shared-imex/``); it
  registers itself in ``shared-imex.<clique>``; to stop, it is cancelled: IMEX stops, its entry
  goes NotReady and keeps its index.

Either stop is bounded by ``stop_timeout``: one that does not end in time raises, which ends the
agent, so a second IMEX never starts beside a stuck one. What runs that fails ends its task with
a ``ComputeDomainsError`` (the agent's ``run()`` then ends with it).

The runner logs through the agent's logger (its records keep the agent's name and node).
"""

from __future__ import annotations

import asyncio
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
    shared_domain,
)
from compute_domains.api import imexsignal, names, sharedimex
from compute_domains.daemon import app as daemon_app
from compute_domains.daemon import launcher
from compute_domains.infra import errors
from compute_domains.infra.kube import informers as kube_informers


class Runner:
    """What one node's resident agent runs now, and its start and stop (see the module docstring).

    Args:
        settings: the agent's settings.
        client: API client (the agent pod's ServiceAccount).
        factory: builds the daemon settings for one CD, or for the pseudo-domain of the shared
            IMEX (``cli.daemon``'s builder).
        programs: how ``nvidia-imex`` runs (child processes when None).
        rng: randomness for backoff jitter.
        informers: the node host's shared watches, if any.
        log: the agent's logger (bound to its node).
    """

    def __init__(
        self,
        settings: AgentSettings,
        client: AsyncClient,
        *,
        factory: DaemonFactory,
        programs: launcher.Launcher | None,
        rng: random.Random,
        informers: kube_informers.Informers | None,
        log: logging.LoggerAdapter[logging.Logger],
    ) -> None:
        self._settings = settings
        self._client = client
        self._factory = factory
        self._programs = programs
        self._rng = rng
        self._informers = informers
        self._log = log
        self.serving: Domain | None = None
        """The CD served now."""
        self.daemon: daemon_app.Daemon | None = None
        """The served CD's daemon, while one runs."""
        self.shared: shared.SharedImex | None = None
        """The clique's shared IMEX, while it runs."""
        self.running: plan.Running | None = None
        """What runs (as the node asked for it)."""
        self.task: asyncio.Task[None] | None = None
        """The task running it; it ends only by failing (or being cancelled by a stop)."""
        self.declined: Assignment | None = None
        """A CD not served here: it has its own per-CD DaemonSet."""
        self.labelled = False
        """Our pod may still carry the CD label of a CD no longer served (a failed unlabel)."""

    async def start(self, wanted: Assignment) -> None:
        """Serve the per-domain CD ``wanted`` (or decline it: see the module docstring)."""
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
                self.declined = wanted
                self._log.warning(
                    "CD %s has its own DaemonSet %s (created in perComputeDomain mode): its pod "
                    "serves it; not serving it here",
                    uid,
                    names.daemon_object_name(uid),
                )
                return
            self.declined = None
            unnamed = Domain(
                assignment=wanted,
                name="",
                namespace="",
                domain_dir=self._settings.domains_dir / uid,
            )
            # We label our pod for the CD, clique ID included, so the daemon does not.
            await asyncio.to_thread(_make_dir, unnamed.domain_dir)
            notes = await self.label(uid, self._factory(unnamed).identity.clique_id)
            name, namespace = await describing
        finally:
            describing.cancel()  # still running only on a return or a failure above
        self.labelled = False  # X's labels replace any left from before
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
        self.serving, self.daemon, self.running = domain, daemon, wanted
        self._log.info(
            "serving CD %s/%s (uid %s, clique %r)", namespace, name, uid, wanted.clique_id
        )
        self.task = asyncio.create_task(
            self._guarded(daemon.run, "the daemon of the served CD"), name=f"daemon-{uid}"
        )

    async def start_shared(self, wanted: Shared) -> None:
        """Run the shared IMEX of the clique ``wanted`` asks for."""
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
        self.shared, self.running = imex, wanted
        self._log.info("running the shared IMEX of clique %r", wanted.clique_id)
        self.task = asyncio.create_task(
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

    async def stop(self) -> None:
        """Stop what runs, if anything (unlabel first for a CD; bounded by ``stop_timeout``).

        Raises:
            ComputeDomainsError: what runs did not stop in time.
        """
        running, task = self.running, self.task
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
                    await self.label(None, leaving=(running.domain_uid,))
            except (TimeoutError, errors.ComputeDomainsError) as err:
                self.labelled = True  # unlabelled after the stop (ResidentAgent._serve)
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
        self.running, self.task = None, None
        self._log.info("stopped %s", what)

    async def label(
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


def _make_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o755)
