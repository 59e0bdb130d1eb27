"""The one classifier of API failures: every row of its table, and the policies built on it."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from compute_domains.infra import errors, kube
from tests.unit.infra.kubefakes import api_error

TEMPORARY, PERMANENT = "temporary", "permanent"


@pytest.mark.parametrize(
    ("code", "reason", "kind", "retry"),
    [
        (400, "BadRequest", kube.Invalid, PERMANENT),
        (401, "Unauthorized", kube.Unauthorized, TEMPORARY),
        (403, "Forbidden", kube.Forbidden, TEMPORARY),
        (404, "NotFound", kube.NotFound, PERMANENT),
        (405, "MethodNotAllowed", kube.Rejected, PERMANENT),
        (409, "AlreadyExists", kube.AlreadyExists, TEMPORARY),
        (409, "Conflict", kube.Conflict, TEMPORARY),
        (410, "Expired", kube.Gone, TEMPORARY),
        (422, "Invalid", kube.Invalid, PERMANENT),
        (429, "TooManyRequests", kube.Unavailable, TEMPORARY),
        (500, "InternalError", kube.Unavailable, TEMPORARY),
        (503, "ServiceUnavailable", kube.Unavailable, TEMPORARY),
    ],
)
def test_each_status_has_one_type_and_one_retry_answer(
    code: int, reason: str, kind: type[kube.KubeError], retry: str
) -> None:
    err = kube.translate(api_error(code, reason, "told by the server"), "get pods/p")
    assert type(err) is kind
    assert isinstance(err, errors.TemporaryError) is (retry == TEMPORARY)
    assert isinstance(err, errors.PermanentError) is (retry == PERMANENT)
    assert isinstance(err, kube.KubeError)
    assert (err.code, err.reason) == (code, reason)
    assert str(err) == f"get pods/p: {code} {reason}: told by the server"
    assert kube.code_of(err) == code


@pytest.mark.parametrize(
    "raw",
    [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), ConnectionResetError("reset")],
)
def test_no_answer_is_temporary(raw: Exception) -> None:
    err = kube.translate(raw, "list nodes")
    assert type(err) is kube.Unreachable
    assert isinstance(err, errors.TemporaryError)
    assert kube.code_of(err) == 0


def test_an_answer_without_a_status_body_is_classified_by_its_code() -> None:
    """A path the server does not serve (no CRD) answers a bare "404 page not found"."""
    request = httpx.Request("GET", "https://api/apis/resource.nvidia.com/v1beta1/computedomains")
    response = httpx.Response(404, text="404 page not found", request=request)
    raw = httpx.HTTPStatusError("404", request=request, response=response)
    err = kube.translate(raw, "list computedomains")
    assert type(err) is kube.NotFound and kube.is_not_found(err)
    assert str(err) == "list computedomains: 404 Not Found"


def test_translation_is_idempotent_and_keeps_the_cause() -> None:
    already = kube.Conflict("x", code=409)
    assert kube.translate(already, "again") is already
    with pytest.raises(kube.NotFound) as caught:
        with kube.translated("get claim ns/c"):
            raise api_error(404, "NotFound", "gone")
    assert kube.is_not_found(caught.value)
    assert kube.is_not_found(caught.value.__cause__)  # type: ignore[arg-type]
    assert not kube.is_not_found(kube.translate(httpx.ConnectError("x"), "y"))


def test_the_forbidden_is_permanent_policy_changes_only_auth_failures() -> None:
    forbidden = kube.translate(api_error(403, "Forbidden"), "patch pod")
    assert isinstance(kube.forbidden_is_permanent(forbidden), errors.PermanentError)
    unauthorized = kube.translate(api_error(401, "Unauthorized"), "patch pod")
    assert isinstance(kube.forbidden_is_permanent(unauthorized), errors.PermanentError)
    busy = kube.translate(api_error(503, "ServiceUnavailable"), "patch pod")
    assert kube.forbidden_is_permanent(busy) is busy
