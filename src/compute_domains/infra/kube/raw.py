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
"""

from __future__ import annotations

import json
from typing import Any

from lightkube import AsyncClient


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
