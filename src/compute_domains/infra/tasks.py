"""One guard for every long-lived task of every component (kopf's ``aiotasks.guard``).

The rule, the same for the controller, the plugin and the daemon:
- a guarded task is long-lived: it ends only by cancellation, which is its normal stop
  (logged at debug, then propagated);
- an exception is a failure: logged once with its traceback under the task's name, then
  propagated, so the enclosing ``TaskGroup`` cancels the siblings and the component fails
  as a whole instead of running on with a dead part;
- a normal return is also a failure (a watch or a server that stops by itself leaves the
  component blind or deaf): logged and raised as ``TemporaryError``, as the daemon always did.

:func:`spawn` starts a guarded, named task in a ``TaskGroup``; :func:`leaves` lists the
failures of nested ``TaskGroup``s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from compute_domains.infra import errors

logger = logging.getLogger(__name__)

Work = Awaitable[None] | Callable[[], Awaitable[None]]


async def guard(name: str, work: Work, *, log: logging.Logger | None = None) -> None:
    """Await ``work`` (an awaitable, or a callable returning one) under the rule above.

    Args:
        name: the task's name in logs and errors.
        work: the task's body.
        log: the component's logger (so a failure is reported where its component logs).

    Raises:
        errors.TemporaryError: ``work`` returned.
    """
    out = log or logger
    try:
        await (work() if callable(work) else work)
    except asyncio.CancelledError:
        out.debug("task %s stopped", name)
        raise
    except BaseException:
        out.exception("task %s failed", name)
        raise
    out.error("task %s ended unexpectedly", name)
    raise errors.TemporaryError(f"task {name} ended unexpectedly")


def spawn(
    tg: asyncio.TaskGroup, name: str, work: Work, *, log: logging.Logger | None = None
) -> asyncio.Task[Any]:
    """Start ``work`` as the guarded task ``name`` in ``tg``."""
    return tg.create_task(guard(name, work, log=log), name=name)


def leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    """Every exception in ``group`` and the groups nested in it (nested ``TaskGroup``s)."""
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def one_error(what: str, group: BaseExceptionGroup[Any]) -> errors.ComputeDomainsError:
    """One error naming every cause in ``group`` (``<what> failed: Type: msg; ...``), chained
    to the first; each task's failure was already logged with its traceback."""
    causes = leaves(group)
    summary = "; ".join(f"{type(e).__name__}: {e}" for e in causes)
    error = errors.ComputeDomainsError(f"{what} failed: {summary}")
    error.__cause__ = causes[0]
    return error
