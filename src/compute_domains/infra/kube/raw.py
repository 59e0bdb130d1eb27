"""Reads that return the API server's JSON undecoded.

lightkube decodes every answer into Python objects, and a JSON object decoded that way keeps
only the last of repeated keys. The API server stores ``runtime.RawExtension`` fields (a
claim's opaque driver parameters) byte for byte, repeated keys included, so a reader that must
see them (the plugin, to reject a config with a duplicate field as NVIDIA's strict decoder
does) reads the object's bytes here. This goes through the lightkube client's own request
building and sending (its configuration, credentials and connection pool); it is the only use
of lightkube's non-public request API, kept in this package.

``list_raw`` lists objects as plain dicts straight from the JSON: lightkube's decoding into
model objects took seconds for 1,152 Nodes on a loaded machine, and a view that only reads a
few fields (``cdctl topology``) has no use for it.

``watch_kept`` watches and decodes only the objects a reader keeps: a simulator node host
follows the pods, Nodes and ResourceSlices of its own nodes through one watch of the whole
cluster's (no field selector names a set of nodes), and decoding every other node's objects
made each host's work grow with the cluster (docs/benchmarks.md, issue 28). It reads the two
fields it needs with msgspec, the decoder lightkube itself uses (decision 0024).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import msgspec
from lightkube import ApiError, AsyncClient
from lightkube.core import decoders
from lightkube.core.selector import build_selector


async def get_raw(client: AsyncClient, res: type[Any], name: str, *, namespace: str) -> bytes:
    """The JSON body of ``GET`` of object ``namespace/name`` of kind ``res``.

    Raises:
        lightkube ApiError or httpx.HTTPError, as ``client.get`` would (``translated`` maps them).
    """
    generic = client._client
    request = generic.prepare_request("get", res, name=name, namespace=namespace)
    # lightkube's own get path: the same request, the same error translation (ApiError).
    response = await generic.send(generic.build_adapter_request(request))  # type: ignore[no-untyped-call]
    generic.raise_for_status(response)  # type: ignore[no-untyped-call]
    body: bytes = response.content
    return body


async def list_raw(
    client: AsyncClient,
    res: type[Any],
    *,
    namespace: str | None = None,
) -> list[dict[str, Any]]:
    """The items of ``LIST`` of kind ``res`` (``namespace="*"``: every namespace) as the API
    server's JSON decoded by ``json``: strings stay strings (timestamps included).

    Raises:
        lightkube ApiError or httpx.HTTPError, as ``client.list`` would.
    """
    generic = client._client
    request = generic.prepare_request("list", res, namespace=namespace)
    response = await generic.send(generic.build_adapter_request(request))  # type: ignore[no-untyped-call]
    generic.raise_for_status(response)  # type: ignore[no-untyped-call]
    items: list[dict[str, Any]] = json.loads(response.content).get("items") or []
    return items


class _Meta(msgspec.Struct):
    name: str = ""
    resourceVersion: str = ""


class _Spec(msgspec.Struct):
    nodeName: str | None = None


class _Probe(msgspec.Struct):
    """The two fields a node host's scope reads, decoded without the rest of the object."""

    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _Spec | None = None


Keep = Callable[[str, "str | None"], bool]
"""``keep(name, node)``: whether an object named ``name`` on node ``node`` (its
``spec.nodeName``, None for kinds without one) belongs to the reader."""


def kept(keep: Keep, obj: Any) -> bool:
    """``keep`` applied to a decoded object."""
    spec = getattr(obj, "spec", None)
    return keep(obj.metadata.name or "", getattr(spec, "nodeName", None))


async def watch_kept(
    client: AsyncClient,
    res: type[Any],
    keep: Keep,
    *,
    namespace: str | None,
    labels: Mapping[str, Any] | None,
    fields: Mapping[str, Any] | None,
    resource_version: str,
    server_timeout: int | None,
) -> AsyncIterator[tuple[str, Any | None, str]]:
    """Watch ``res`` from ``resource_version`` (one request, until the server ends it), yielding
    ``(event type, object or None, its resourceVersion)``: the object is decoded only when
    ``keep`` holds for it. The other events cost a parse of two fields, not a whole model (a
    pod is about 9 KB; its model about 0.3 ms, its two fields about 0.05 ms), and still advance
    the version a resumed watch starts from.

    Raises:
        lightkube ApiError (an ERROR event, e.g. 410 Gone) or httpx.HTTPError, as
        ``client.watch`` would.
    """
    generic = client._client
    request = generic.prepare_request(
        "list",
        res,
        namespace=namespace,
        watch=True,
        params={
            "timeoutSeconds": server_timeout,
            "resourceVersion": resource_version,
            "labelSelector": build_selector(dict(labels)) if labels else None,
            "fieldSelector": build_selector(dict(fields), for_fields=True) if fields else None,
        },
    )
    sent = generic._client.build_request(
        request.method, request.url, params=request.params, timeout=generic._watch_timeout
    )
    response = await generic.send(sent, stream=True)  # type: ignore[no-untyped-call]
    try:
        response.raise_for_status()
        async for line in response.aiter_lines():
            event = decoders.decode_watch_event(line)
            if event.type == "ERROR":
                raise ApiError(status=decoders.decode_status(event.object))
            probe = msgspec.json.decode(event.object, type=_Probe)
            node = probe.spec.nodeName if probe.spec is not None else None
            obj = (
                decoders.decode_object(event.object, res)
                if keep(probe.metadata.name, node)
                else None
            )
            yield event.type, obj, probe.metadata.resourceVersion
    finally:
        await response.aclose()
