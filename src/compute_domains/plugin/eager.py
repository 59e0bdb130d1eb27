"""The node's shared-IMEX label outside of claims: joined early (eager), or freed at start.

The label ``compute-domains/shared-imex=on`` tells the resident agent to run the clique's shared
IMEX, and puts the node in the per-clique scope (``holder``). A per-clique claim writes it
(``shared.attach``) and no unprepare removes it: the shared IMEX is never stopped by a detach.
Outside of claims, ``PluginSettings.shared_imex_eager`` decides:

- **Eager** (``SharedLabel.run``, on a node with a clique ID): label the node at start, so the
  clique's IMEX already runs before the first per-clique CD and formation pays no IMEX start.
  While a per-domain CD holds the node (a live per-domain claim, or its warm-spare label), wait,
  and label it once that CD's last claim is gone (``poke``: every change of the node's holder
  wakes the task). The check and the write share one ``DeviceState`` transaction, so no
  per-domain prepare slips in between, and the write is conditional on the Node's
  resourceVersion and refused by a CD label (``shared.join``). It labels once: an operator who
  removes the label later is not overruled until the next start.
- **Not eager** (``SharedLabel.at_start``): at start, with no per-clique claim live, remove the
  label if it is there, so a cluster switched back to ``perDomain`` (or eager switched off)
  frees its idle nodes for per-domain CDs; the node's shared IMEX then stops. It leaves a node
  whose per-clique claims are live alone, and once the plugin runs nothing removes the label
  (the next per-clique claim would only write it again). Other nodes of the clique lose an idle
  peer; no workload of theirs imported anything from this node (it served none).
"""

from __future__ import annotations

import asyncio
import logging

from compute_domains.api import sharedimex
from compute_domains.infra import backoff, errors
from compute_domains.plugin import holder, shared, state

logger = logging.getLogger(__name__)

_RETRY = backoff.Backoff(initial=0.5, maximum=30.0)


class SharedLabel:
    """Writes or removes the shared-IMEX label of one node as ``eager`` says."""

    def __init__(
        self,
        *,
        device_state: state.DeviceState,
        shared_imex: shared.SharedPort,
        eager: bool,
        clique_id: str,
        node: str,
    ) -> None:
        self._state = device_state
        self._shared = shared_imex
        self.eager = eager and bool(clique_id)
        """Whether ``run`` labels the node (eager asked, and the node has a clique ID)."""
        self._not_eager = not eager
        self._wake = asyncio.Event()
        self._waits_for = ""
        self._extra = {"node": node}

    def poke(self) -> None:
        """The node's holder changed: an eager task waiting for a per-domain CD looks again."""
        self._wake.set()

    async def at_start(self) -> None:
        """Not eager: remove the label when no per-clique claim is live (a failure is logged:
        the label then only keeps the idle node in the per-clique scope until the next start)."""
        if not self._not_eager:
            return
        try:
            await self._leave_if_idle()
        except errors.TemporaryError as err:
            logger.warning("freeing the node of the shared IMEX: %s", err, extra=self._extra)

    async def _leave_if_idle(self) -> None:
        async with self._state.transaction() as txn:
            if holder.claims_by_domain(txn.current, sharedimex.Scope.PER_CLIQUE):
                return
            if await self._shared.leave():
                logger.info(
                    "removed node label %s: no per-clique claim is live here and the shared "
                    "IMEX is not eager (SHARED_IMEX_EAGER off); per-domain ComputeDomains can use "
                    "the node",
                    sharedimex.SHARED_IMEX_LABEL,
                    extra=self._extra,
                )
            labels = self._state.labels
            self._state.set_node_labels(holder.NodeLabels(warm_for=labels.warm_for))

    async def run(self) -> None:
        """Eager: label the node as soon as no per-domain CD holds it, then idle until
        cancelled (a guarded task must not return)."""
        if self.eager:
            await self._join_when_free()
        await asyncio.Event().wait()

    async def _join_when_free(self) -> None:
        failures = 0
        while True:
            try:
                if await self.try_join():
                    return
                failures = 0
                await self._wake.wait()
                self._wake.clear()
            except errors.TemporaryError as err:  # the API, or a CD label a crash left
                delay = _RETRY.delay(failures)
                failures += 1
                logger.warning(
                    "labelling the node for the shared IMEX: %s; retrying in %.1fs",
                    err,
                    delay,
                    extra=self._extra,
                )
                await asyncio.sleep(delay)

    async def try_join(self) -> bool:
        """One attempt: label the node unless a per-domain CD holds it; whether it is labelled
        now.

        Raises:
            errors.TemporaryError: the API failed, or a CD label is on the Node.
        """
        async with self._state.transaction() as txn:
            held = holder.holder_of(txn.current) or self._state.labels.warm_for
            if held:
                if held == self._waits_for:
                    return False
                self._waits_for = held
                logger.info(
                    "shared IMEX is eager, but ComputeDomain %s (scope %s) holds the node; "
                    "labelling it once that one leaves",
                    held,
                    sharedimex.Scope.PER_DOMAIN,
                    extra=self._extra,
                )
                return False
            if await self._shared.join():
                logger.info(
                    "labelled node %s=%s: the clique's shared IMEX starts before any per-clique "
                    "ComputeDomain (SHARED_IMEX_EAGER)",
                    sharedimex.SHARED_IMEX_LABEL,
                    sharedimex.SHARED_IMEX_ON,
                    extra=self._extra,
                )
            self._state.shared_label_written()
            return True
