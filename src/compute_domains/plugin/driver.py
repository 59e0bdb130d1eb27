"""Batch orchestration of kubelet calls: per-claim isolation, bounded retries, metrics, logs.

One NodePrepareResources call may carry several claims. Each claim is handled in its own task,
so one slow or failing claim never delays or fails another, and every claim gets a result:
- the claim is read fresh from the API (a missing claim, a new UID or no allocation fail it), as
  the bytes the API server sent, so that a repeated key in our opaque parameters is seen and
  refused (``api.configs.parse_marking``) instead of silently losing to the last value;
- temporary errors are retried with capped exponential backoff (250 ms doubling to 3 s) until
  the call's budget (below the kubelet's 45 s) is spent; the last error is then returned, so
  the kubelet's event says what the claim is waiting for;
- permanent errors are returned at once (the kubelet retries the pod later anyway).
API failures are translated by ``infra.kube``'s classifier (the plugin keeps its default policy:
a 403 or a lost connection is temporary and retried within the budget, a 404 permanent).
Unexpected exceptions are bugs or host trouble: they are logged with their traceback and
treated as temporary. Whatever one claim raises, even past these rules, ends as that claim's
error (the per-claim boundary in ``_isolated``): a batch never fails as a whole.
``asyncio.CancelledError`` always propagates.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Final, TypeVar

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.api import configs as api_configs
from compute_domains.api import names
from compute_domains.infra import backoff, errors, filelock, kube
from compute_domains.plugin import checkpoint, configs, metrics, state
from compute_domains.plugin.config import RetrySettings

logger = logging.getLogger(__name__)

T = TypeVar("T")
ClaimReader = Callable[[str, str], Awaitable[bytes]]
"""(namespace, name) → the ResourceClaim's JSON as the API server sent it."""
_DRIVER = names.DRIVER_NAME
_VERB: Final = MappingProxyType({metrics.PREPARE: "preparing", metrics.UNPREPARE: "unpreparing"})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    namespace: str
    name: str
    uid: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Result:
    """The outcome of one claim: devices, or an error text for the kubelet."""

    devices: tuple[checkpoint.PreparedDevice, ...] = ()
    error: str = ""


class Driver:
    """Turns kubelet batches into per-claim ``DeviceState`` calls."""

    def __init__(
        self,
        *,
        client: AsyncClient,
        device_state: state.DeviceState,
        node: str,
        retry: RetrySettings,
        metrics: metrics.PluginMetrics,
        read_claim: ClaimReader | None = None,
    ) -> None:
        self._read_claim = read_claim or functools.partial(_read_claim, client)
        self._state = device_state
        self._node = node
        self._retry = retry
        self._metrics = metrics
        self._backoff = backoff.Backoff(
            initial=retry.initial_backoff_s, maximum=retry.max_backoff_s, jitter=0.0
        )

    async def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, Result]:
        """Prepare every claim; claim UID → result."""
        results = await asyncio.gather(*(self._isolated_prepare(r) for r in refs))
        return {r.uid: res for r, res in zip(refs, results, strict=True)}

    async def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """Unprepare every claim; claim UID → error text ("" on success)."""
        results = await asyncio.gather(*(self._isolated_unprepare(r) for r in refs))
        return {r.uid: res for r, res in zip(refs, results, strict=True)}

    async def _isolated_prepare(self, ref: ClaimRef) -> Result:
        failure = await _isolated(self._prepare_one(ref), self._log(ref), "preparing")
        if isinstance(failure, Result):
            return failure
        where = f"{ref.namespace}/{ref.name} ({ref.uid})"
        return Result(error=f"error preparing devices for claim {where}: {failure}")

    async def _isolated_unprepare(self, ref: ClaimRef) -> str:
        outcome = await _isolated(self._unprepare_one(ref), self._log(ref), "unpreparing")
        if isinstance(outcome, _Failure):
            return f"unprepare claim {ref.namespace}/{ref.name} ({ref.uid}): {outcome}"
        return outcome

    def _log(self, ref: ClaimRef) -> logging.LoggerAdapter[logging.Logger]:
        bound = {"claim": f"{ref.namespace}/{ref.name}", "claim_uid": ref.uid, "node": self._node}
        return logging.LoggerAdapter(logger, bound)

    async def _prepare_one(self, ref: ClaimRef) -> Result:
        log = self._log(ref)
        deadline = asyncio.get_running_loop().time() + self._retry.budget_s
        claim: configs.Claim | None = None

        async def attempt() -> tuple[checkpoint.PreparedDevice, ...]:
            nonlocal claim
            if claim is None:
                claim = await self._fetch(ref)
            left = deadline - asyncio.get_running_loop().time()
            wait = min(self._retry.readiness_timeout_s, left)
            return await self._state.prepare(claim, wait_s=wait)

        outcome = await self._retrying(metrics.PREPARE, attempt, deadline, log)
        if isinstance(outcome, str):
            # "error preparing devices": the words NVIDIA's tooling finds in the pod's event.
            where = f"{ref.namespace}/{ref.name} ({ref.uid})"
            return Result(error=f"error preparing devices for claim {where}: {outcome}")
        took = asyncio.get_running_loop().time() - (deadline - self._retry.budget_s)
        log.info("prepared claim: %s in %.3fs", ", ".join(d.device_name for d in outcome), took)
        return Result(devices=outcome)

    async def _unprepare_one(self, ref: ClaimRef) -> str:
        log = self._log(ref)
        deadline = asyncio.get_running_loop().time() + self._retry.budget_s

        async def attempt() -> checkpoint.ClaimEntry | None:
            return await self._state.unprepare(ref.uid)

        outcome = await self._retrying(metrics.UNPREPARE, attempt, deadline, log)
        if isinstance(outcome, str):
            return f"unprepare claim {ref.namespace}/{ref.name} ({ref.uid}): {outcome}"
        if outcome is None:
            log.info("Unprepare noop: claim not found in checkpoint data")
        else:
            log.info("unprepared claim (was %s)", outcome.state.value)
        return ""

    async def _retrying(
        self,
        operation: str,
        attempt: Callable[[], Awaitable[T]],
        deadline: float,
        log: logging.LoggerAdapter[logging.Logger],
    ) -> T | str:
        """Run ``attempt`` until it succeeds, fails permanently or the deadline nears.

        Returns the attempt's value, or the error text to hand to the kubelet.
        """
        loop = asyncio.get_running_loop()
        retry_type = "prepare_devices" if operation == metrics.PREPARE else "unprepare_devices"
        inflight = self._metrics.inflight.labels(_DRIVER, operation)
        tries = 0
        while True:
            started = loop.time()
            inflight.inc()
            try:
                value = await attempt()
            except errors.PermanentError as err:
                self._metrics.error(operation, "permanent")
                log.error("Permanent error %s devices: %s", _VERB[operation], err)
                return f"permanent error: {err}"
            except filelock.LockTimeoutError as err:
                self._metrics.error(operation, "lock_acquire")
                last = str(err)
            except errors.TemporaryError as err:
                self._metrics.error(operation, retry_type)
                last = str(err)
            except httpx.HTTPError as err:  # an API call not translated where it was made
                failure = kube.translate(err, "API call")
                if isinstance(failure, errors.PermanentError):
                    self._metrics.error(operation, "permanent")
                    log.error("Permanent error %s devices: %s", _VERB[operation], failure)
                    return f"permanent error: {failure}"
                self._metrics.error(operation, retry_type)
                last = f"API error: {failure}"
            except (OSError, ValueError, KeyError, TypeError) as err:  # host trouble or a bug
                self._metrics.error(operation, retry_type)
                log.exception("unexpected error %s devices", _VERB[operation])
                last = f"internal error: {type(err).__name__}: {err}"
            else:
                self._metrics.requests.labels(_DRIVER, operation).inc()
                self._metrics.duration.labels(_DRIVER, operation).observe(loop.time() - started)
                return value
            finally:
                inflight.dec()
            delay = self._backoff.delay(tries)
            tries += 1
            if loop.time() + delay >= deadline:
                log.warning("giving up for now after %d attempts: %s", tries, last)
                return last
            log.debug("attempt %d failed, retrying in %.2fs: %s", tries, delay, last)
            await asyncio.sleep(delay)

    async def _fetch(self, ref: ClaimRef) -> configs.Claim:
        where = f"{ref.namespace}/{ref.name}"
        try:
            with kube.translated(f"reading claim {where}"):
                body = await self._read_claim(ref.namespace, ref.name)
        except kube.NotFound as err:
            raise errors.PermanentError(f"claim {where} not found") from err
        doc = api_configs.parse_marking(body)
        meta = _mapping(doc.get("metadata"))
        if meta.get("uid") != ref.uid:
            raise errors.PermanentError(
                f"claim {where} got replaced (UID {meta.get('uid')}, expected {ref.uid})"
            )
        status = _mapping(doc.get("status"))
        if not status.get("allocation"):
            raise errors.PermanentError(f"claim {where} not allocated")
        return configs.Claim(
            uid=ref.uid,
            namespace=ref.namespace,
            name=ref.name,
            resource_version=str(meta.get("resourceVersion") or ""),
            status=status,
        )


async def _read_claim(client: AsyncClient, namespace: str, name: str) -> bytes:
    return await kube.get_raw(client, ResourceClaim, name, namespace=namespace)


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


class _Failure(str):
    """The text of a claim's failure that escaped every rule above (see ``_isolated``)."""

    __slots__ = ()


async def _isolated(
    work: Awaitable[T], log: logging.LoggerAdapter[logging.Logger], verb: str
) -> T | _Failure:
    """The per-claim error boundary: ``work``'s value, or its failure as this claim's text.

    ``_retrying`` already classifies what it knows; this catches the rest (a bug, an error type
    nobody expected) so that one claim's failure never becomes the whole batch's.
    """
    try:
        return await work
    except Exception as err:
        log.exception("unexpected error %s devices", verb)
        return _Failure(f"internal error: {type(err).__name__}: {err}")
