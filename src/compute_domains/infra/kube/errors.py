"""The one translation of Kubernetes API failures into the project's error vocabulary.

lightkube raises ``ApiError`` (an HTTP status with the server's ``Status`` object), httpx raises
transport errors, the OS raises ``OSError``. :func:`translate` turns any of them into one typed
:class:`KubeError` that also says whether retrying can help (``infra.errors.TemporaryError`` or
``PermanentError``); nothing outside ``infra/kube`` needs to know lightkube's types.

The classifier table (the *default* policy; ``tests/unit/infra/test_kube_errors.py`` pins each row):

=======================  ======================  ==========  ===================================
status / failure         type                    retry?      why
=======================  ======================  ==========  ===================================
404                      ``NotFound``            permanent   the object is gone; retrying the
                                                             same request cannot find it
409 AlreadyExists        ``AlreadyExists``       temporary   the name is taken: re-read, adopt
409 (other)              ``Conflict``            temporary   stale resourceVersion: re-read
410                      ``Gone``                temporary   watch version expired: re-list
400, 422                 ``Invalid``             permanent   the object we sent is refused
401                      ``Unauthorized``        temporary   credentials may be rotated
403                      ``Forbidden``           temporary   RBAC may be granted later
429, 5xx                 ``Unavailable``         temporary   the server is busy or restarting
other 4xx                ``Rejected``            permanent   the request itself is wrong
transport, OSError       ``Unreachable``         temporary   the server may come back
=======================  ======================  ==========  ===================================

Callers whose policy differs state it where they choose it: the daemon, for example, treats a
403 as fatal (:func:`forbidden_is_permanent`), because a daemon without RBAC never heals and
its pod's restarts are the signal an operator sees, while the controller retries it with
backoff until an administrator fixes the role.

Invariants: translation is idempotent (an already translated error is returned as is), and the
translated error keeps the original as ``__cause__`` when raised through :func:`translated`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Final

import httpx2 as httpx
from lightkube.core.exceptions import ApiError

from compute_domains.infra import errors

RAW_FAILURES: Final = (httpx.HTTPError, OSError)
"""What an API call raises before translation (``ApiError`` is an ``httpx.HTTPError``)."""


class KubeError(errors.ComputeDomainsError):
    """A failed API request; ``code``/``reason`` are the server's (0/"" without an answer)."""

    def __init__(self, message: str, *, code: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


class NotFound(KubeError, errors.PermanentError):
    """404: the object (or its namespace) does not exist."""


class AlreadyExists(KubeError, errors.TemporaryError):
    """409 AlreadyExists: an object of that name exists; re-read it."""


class Conflict(KubeError, errors.TemporaryError):
    """409 Conflict: the object changed since it was read; re-read and retry."""


class Gone(KubeError, errors.TemporaryError):
    """410: the resourceVersion a watch asked for is no longer kept; list again."""


class Invalid(KubeError, errors.PermanentError):
    """400 BadRequest or 422 Invalid: the object we sent cannot be accepted."""


class Unauthorized(KubeError, errors.TemporaryError):
    """401: our credentials were refused (a rotated token may fix it)."""


class Forbidden(KubeError, errors.TemporaryError):
    """403: RBAC forbids the request (retried by default; see the module docstring)."""


class Unavailable(KubeError, errors.TemporaryError):
    """429 or 5xx: the server is overloaded, restarting or failing; retry later."""


class Rejected(KubeError, errors.PermanentError):
    """Any other 4xx: the request itself is wrong."""


class Unreachable(KubeError, errors.TemporaryError):
    """No answer: a transport error, a timeout or an OS-level connection failure."""


_BY_CODE: Final[dict[int, type[KubeError]]] = {
    400: Invalid,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: Unavailable,
}


def _for_status(code: int, reason: str) -> type[KubeError]:
    if code == 409 and reason == "AlreadyExists":
        return AlreadyExists
    if code in _BY_CODE:
        return _BY_CODE[code]
    if code >= 500:
        return Unavailable
    return Rejected


def translate(err: BaseException, what: str) -> errors.ComputeDomainsError:
    """The project error for a failed request; ``what`` names the request in the message.

    Errors of this project pass through unchanged, so wrapping a call twice is harmless.
    """
    if isinstance(err, errors.ComputeDomainsError):
        return err
    if isinstance(err, ApiError):
        code = err.status.code or 0
        reason = err.status.reason or ""
        message = f"{what}: {code} {reason}: {err.status.message or ''}".rstrip(": ")
        return _for_status(code, reason)(message, code=code, reason=reason)
    if isinstance(err, httpx.HTTPStatusError):
        # An answer without a Status body (a path the server does not serve: "404 page not
        # found" for a type whose CRD is not installed).
        code, reason = err.response.status_code, err.response.reason_phrase
        return _for_status(code, reason)(f"{what}: {code} {reason}", code=code, reason=reason)
    return Unreachable(f"{what}: {type(err).__name__}: {err}")


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Run a block of API calls; a raw failure inside leaves it translated (``from`` the raw)."""
    try:
        yield
    except RAW_FAILURES as err:
        raise translate(err, what) from err


def code_of(err: BaseException) -> int:
    """The HTTP status of a failed request (translated or raw), 0 when there was no answer."""
    if isinstance(err, KubeError):
        return err.code
    if isinstance(err, ApiError):
        return err.status.code or 0
    return 0


def server_message(err: BaseException) -> str:
    """The server's own words for a failure (its Status message), else the error's text."""
    if isinstance(err, ApiError):
        return str(err.status.message or err)
    if isinstance(err, KubeError) and isinstance(err.__cause__, ApiError):
        return server_message(err.__cause__)
    return str(err)


def is_not_found(err: BaseException) -> bool:
    """Whether the failure is a 404 (translated or raw)."""
    return code_of(err) == 404


def forbidden_is_permanent(err: errors.ComputeDomainsError) -> errors.ComputeDomainsError:
    """A policy: 401/403 become permanent (for callers that must not retry missing RBAC)."""
    if isinstance(err, (Forbidden, Unauthorized)):
        return errors.PermanentError(str(err))
    return err
