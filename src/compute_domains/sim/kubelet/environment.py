"""Container environment and the pod facts it draws on, resolved the way a kubelet does.

A container's environment is service discovery (``KUBERNETES_SERVICE_*``), ``HOSTNAME``, then
``envFrom`` sources, then ``env`` entries: literal values (with ``$(VAR)`` expansion from what
is set so far, ``expand``), ConfigMap/Secret keys and downward-API field references
(``field_ref``, which downward-API volumes use too). A missing object or key raises
``EnvError`` carrying the kubelet's own message (waiting reason ``CreateContainerConfigError``);
the container waits and is retried. ``container_mounts`` turns volumeMounts into the runtime's
mounts. ConfigMap and Secret reads (``get_object``, ``object_data``) are shared with
``volumes``.
"""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.resources.core_v1 import ConfigMap, Pod, Secret

from compute_domains.containers import runtime
from compute_domains.infra import kube


class EnvError(Exception):
    """The environment cannot be built (waiting reason ``CreateContainerConfigError``)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PodContext:
    """What env and volume resolution need to know about the pod and node."""

    pod: Pod
    node_name: str
    node_ip: str
    pod_ip: str
    node_root: Path
    api_host: str
    api_port: int


async def get_object(client: AsyncClient, res: type[Any], name: str, ns: str) -> Any | None:
    """A ConfigMap or Secret; None when it does not exist."""
    try:
        return await client.get(res, name, namespace=ns)
    except httpx.HTTPError as err:
        if kube.is_not_found(err):
            return None
        raise


def object_data(obj: Any) -> dict[str, bytes]:
    """A ConfigMap's or Secret's entries, decoded to bytes (``stringData`` and ``binaryData``
    included)."""
    out: dict[str, bytes] = {}
    if isinstance(obj, Secret):
        for k, v in (obj.data or {}).items():
            out[k] = base64.b64decode(v)
        for k, v in (obj.stringData or {}).items():
            out[k] = v.encode()
    else:
        for k, v in (obj.data or {}).items():
            out[k] = v.encode()
        for k, v in (obj.binaryData or {}).items():
            out[k] = base64.b64decode(v)
    return out


def field_ref(ctx: PodContext, path: str) -> str:
    """Value of a downward-API ``fieldRef`` path for this pod."""
    meta, spec = ctx.pod.metadata, ctx.pod.spec
    assert meta is not None and spec is not None
    simple = {
        "metadata.name": meta.name,
        "metadata.namespace": meta.namespace,
        "metadata.uid": meta.uid,
        "spec.nodeName": ctx.node_name,
        "spec.serviceAccountName": spec.serviceAccountName or "default",
        "status.hostIP": ctx.node_ip,
        "status.podIP": ctx.pod_ip,
        "status.hostIPs": ctx.node_ip,
        "status.podIPs": ctx.pod_ip,
    }
    if path in simple:
        return str(simple[path] or "")
    for prefix, mapping in (
        ("metadata.labels", meta.labels),
        ("metadata.annotations", meta.annotations),
    ):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return str((mapping or {}).get(path[len(prefix) + 2 : -2], ""))
    raise EnvError(f'unsupported fieldRef "{path}"')


async def _key(
    client: AsyncClient, res: type[Any], ns: str, name: str, key: str, optional: bool
) -> str | None:
    obj = await get_object(client, res, name, ns)
    kind = "configmap" if res is ConfigMap else "secret"
    if obj is None:
        if optional:
            return None
        raise EnvError(f'{kind} "{name}" not found')
    data = object_data(obj)
    if key not in data:
        if optional:
            return None
        raise EnvError(f"couldn't find key {key} in {res.__name__} {ns}/{name}")
    return data[key].decode(errors="replace")


async def container_env(client: AsyncClient, ctx: PodContext, container: Any) -> dict[str, str]:
    """The container's environment: service discovery first, then envFrom, then env."""
    ns = ctx.pod.metadata.namespace if ctx.pod.metadata else "default"
    assert ns is not None
    env: dict[str, str] = {
        "KUBERNETES_SERVICE_HOST": ctx.api_host,
        "KUBERNETES_SERVICE_PORT": str(ctx.api_port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(ctx.api_port),
        "HOSTNAME": ctx.pod.metadata.name if ctx.pod.metadata and ctx.pod.metadata.name else "",
    }
    for src in container.envFrom or []:
        ref, res = (src.configMapRef, ConfigMap) if src.configMapRef else (src.secretRef, Secret)
        obj = await get_object(client, res, ref.name, ns)
        if obj is None:
            if ref.optional:
                continue
            raise EnvError(
                f'{"configmap" if res is ConfigMap else "secret"} "{ref.name}" not found'
            )
        for k, v in object_data(obj).items():
            env[(src.prefix or "") + k] = v.decode(errors="replace")
    for var in container.env or []:
        if var.valueFrom is None:
            env[var.name] = expand(var.value or "", env)
            continue
        vf = var.valueFrom
        value: str | None
        if vf.fieldRef is not None:
            value = field_ref(ctx, vf.fieldRef.fieldPath)
        elif vf.configMapKeyRef is not None:
            r = vf.configMapKeyRef
            value = await _key(client, ConfigMap, ns, r.name, r.key, bool(r.optional))
        elif vf.secretKeyRef is not None:
            r = vf.secretKeyRef
            value = await _key(client, Secret, ns, r.name, r.key, bool(r.optional))
        elif vf.resourceFieldRef is not None:
            value = "0"
        else:
            raise EnvError(f"env {var.name}: unsupported valueFrom")
        if value is not None:
            env[var.name] = value
    return env


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known names are replaced, ``$$`` is a literal ``$``,
    unknown references stay as written (the kubelet's rules for env values, command and args)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and (end := text.find(")", i + 2)) != -1:
            name = text[i + 2 : end]
            out.append(env[name] if name in env else text[i : end + 1])
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def container_mounts(container: Any, volume_paths: dict[str, str]) -> list[runtime.Mount]:
    """The container's volumeMounts as runtime mounts (subPath supported)."""
    mounts = []
    for vm in container.volumeMounts or []:
        src = volume_paths.get(vm.name)
        if src is None:
            raise EnvError(f'volume "{vm.name}" referenced by a volumeMount is not defined')
        if vm.subPath:
            src = str(Path(src) / vm.subPath)
        mounts.append(runtime.Mount(source=src, target=vm.mountPath, readonly=bool(vm.readOnly)))
    return mounts
