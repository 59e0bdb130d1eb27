"""Pod volumes and container environment, resolved the way a kubelet does.

Volumes are materialised under the node's ``var/lib/kubelet/pods/<uid>/volumes`` (ConfigMaps,
Secrets, projected ServiceAccount tokens from the TokenRequest API, downward API files,
emptyDir) or mapped into the node root (hostPath). Environment variables come from literal
values, ConfigMap/Secret keys, ``envFrom`` and downward-API field references. A missing object
raises ``VolumeError``/``EnvError`` carrying the kubelet's own message, so the pod reports it
as a kubelet would (event + waiting reason) and the worker retries.
"""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.models.authentication_v1 import BoundObjectReference, TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Pod, Secret, ServiceAccount

from compute_domains.containers import runtime
from compute_domains.infra import atomicfile, kube


class VolumeError(Exception):
    """A volume cannot be set up yet (event reason ``FailedMount``)."""


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


async def _get(client: AsyncClient, res: type[Any], name: str, ns: str) -> Any | None:
    try:
        return await client.get(res, name, namespace=ns)
    except httpx.HTTPError as err:
        if kube.is_not_found(err):
            return None
        raise


def _data_of(obj: Any) -> dict[str, bytes]:
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
    obj = await _get(client, res, name, ns)
    kind = "configmap" if res is ConfigMap else "secret"
    if obj is None:
        if optional:
            return None
        raise EnvError(f'{kind} "{name}" not found')
    data = _data_of(obj)
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
        obj = await _get(client, res, ref.name, ns)
        if obj is None:
            if ref.optional:
                continue
            raise EnvError(
                f'{"configmap" if res is ConfigMap else "secret"} "{ref.name}" not found'
            )
        for k, v in _data_of(obj).items():
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


def _write_files(target: Path, files: dict[str, bytes], mode: int) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        atomicfile.write_atomic(target / rel, data, mode=mode)


async def _token(
    client: AsyncClient, ctx: PodContext, audience: str | None, expiration: int | None
) -> bytes:
    meta, spec = ctx.pod.metadata, ctx.pod.spec
    assert meta is not None and spec is not None and meta.name and meta.uid
    sa = spec.serviceAccountName or "default"
    req = ServiceAccount.Token(
        metadata=ObjectMeta(name=sa, namespace=meta.namespace),
        spec=TokenRequestSpec(
            audiences=[audience] if audience else [],
            expirationSeconds=expiration or 3607,
            boundObjectRef=BoundObjectReference(
                kind="Pod", apiVersion="v1", name=meta.name, uid=meta.uid
            ),
        ),
    )
    resp = await client.create(req, name=sa, namespace=meta.namespace)
    assert resp.status is not None
    return str(resp.status.token).encode()


async def _projected(client: AsyncClient, ctx: PodContext, vol: Any) -> dict[str, bytes]:
    ns = ctx.pod.metadata.namespace if ctx.pod.metadata else ""
    files: dict[str, bytes] = {}
    for src in vol.projected.sources or []:
        if src.serviceAccountToken is not None:
            t = src.serviceAccountToken
            files[t.path] = await _token(client, ctx, t.audience, t.expirationSeconds)
        elif src.configMap is not None or src.secret is not None:
            ref, res = (
                (src.configMap, ConfigMap) if src.configMap is not None else (src.secret, Secret)
            )
            obj = await _get(client, res, ref.name, ns or "")
            if obj is None:
                if ref.optional:
                    continue
                kind = "configmap" if res is ConfigMap else "secret"
                raise VolumeError(f'{kind} "{ref.name}" not found')
            files.update(_select(_data_of(obj), ref.items))
        elif src.downwardAPI is not None:
            for item in src.downwardAPI.items or []:
                if item.fieldRef is not None:
                    files[item.path] = field_ref(ctx, item.fieldRef.fieldPath).encode()
    return files


def _select(data: dict[str, bytes], items: list[Any] | None) -> dict[str, bytes]:
    if not items:
        return data
    return {it.path: data[it.key] for it in items if it.key in data}


async def setup_volumes(client: AsyncClient, ctx: PodContext) -> dict[str, str]:
    """Materialise every volume of the pod; returns volume name → host path."""
    meta, spec = ctx.pod.metadata, ctx.pod.spec
    assert meta is not None and spec is not None and meta.uid
    base = ctx.node_root / "var/lib/kubelet/pods" / meta.uid / "volumes"
    paths: dict[str, str] = {}
    for vol in spec.volumes or []:
        target = base / vol.name
        if vol.hostPath is not None:
            host = ctx.node_root / vol.hostPath.path.lstrip("/")
            kind = vol.hostPath.type or ""
            if kind in ("DirectoryOrCreate", "") and not host.exists():
                host.mkdir(parents=True, exist_ok=True)
            elif kind == "FileOrCreate" and not host.exists():
                host.parent.mkdir(parents=True, exist_ok=True)
                host.touch()
            elif kind in ("Directory", "File", "Socket") and not host.exists():
                raise VolumeError(
                    f"hostPath type check failed: {vol.hostPath.path} is not a {kind.lower()}"
                )
            paths[vol.name] = str(host)
            continue
        if vol.emptyDir is not None:
            target.mkdir(parents=True, exist_ok=True)
        elif vol.configMap is not None or vol.secret is not None:
            is_cm = vol.configMap is not None
            ref: Any = vol.configMap if is_cm else vol.secret
            name = str(ref.name if is_cm else ref.secretName)
            obj = await _get(client, ConfigMap if is_cm else Secret, name, meta.namespace or "")
            if obj is None:
                if ref.optional:
                    target.mkdir(parents=True, exist_ok=True)
                else:
                    kind = "configmap" if is_cm else "secret"
                    raise VolumeError(
                        f'MountVolume.SetUp failed for volume "{vol.name}" : '
                        f'{kind} "{name}" not found'
                    )
            else:
                _write_files(target, _select(_data_of(obj), ref.items), 0o644)
        elif vol.projected is not None:
            try:
                files = await _projected(client, ctx, vol)
            except VolumeError as err:
                raise VolumeError(
                    f'MountVolume.SetUp failed for volume "{vol.name}" : {err}'
                ) from err
            _write_files(target, files, 0o644)
        elif vol.downwardAPI is not None:
            files = {
                it.path: field_ref(ctx, it.fieldRef.fieldPath).encode()
                for it in vol.downwardAPI.items or []
                if it.fieldRef is not None
            }
            _write_files(target, files, 0o644)
        else:
            raise VolumeError(
                f'volume "{vol.name}": this simulated kubelet supports hostPath, '
                "emptyDir, configMap, secret, projected and downwardAPI volumes"
            )
        paths[vol.name] = str(target)
    return paths


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
