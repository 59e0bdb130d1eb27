"""The Kubernetes access layer every component uses (controller, plugin, daemon, simulator).

One package, one module per job:

- ``client``: build the lightkube client from explicit ``KubeSettings`` (the only constructor);
- ``errors``: the one classifier of API failures (typed, temporary or permanent);
- ``watch``: one resumable list+watch stream (resourceVersion resume, 410 → re-list);
- ``cache``: an indexed, read-your-writes cache over that stream, shared by subscribers;
- ``informers``: one such cache per kind per process, which a host hands to every component
  it builds (the simulator's node hosts), and followers of one object in it;
- ``events``: a bounded Event recorder that aggregates repeats as the kubelet's does;
- ``raw``: one object's JSON as the API server sent it (repeated keys kept); a list as plain
  dicts, undecoded (``cdctl topology`` at 1,152 nodes).

This ``__init__`` re-exports the names callers use (``kube.client(...)``, ``kube.NotFound``,
``kube.translated(...)``), so a call site reads as ``kube.<thing>`` whichever module holds it;
no lightkube exception type leaves this package.
"""

from compute_domains.infra.kube.client import KubeSettings, client, load_config
from compute_domains.infra.kube.errors import (
    RAW_FAILURES,
    AlreadyExists,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    Rejected,
    Unauthorized,
    Unavailable,
    Unreachable,
    code_of,
    forbidden_is_permanent,
    is_not_found,
    server_message,
    translate,
    translated,
)
from compute_domains.infra.kube.raw import get_raw, list_raw

__all__ = [
    "RAW_FAILURES",
    "AlreadyExists",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeError",
    "KubeSettings",
    "NotFound",
    "Rejected",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
    "client",
    "code_of",
    "forbidden_is_permanent",
    "get_raw",
    "is_not_found",
    "list_raw",
    "load_config",
    "server_message",
    "translate",
    "translated",
]
