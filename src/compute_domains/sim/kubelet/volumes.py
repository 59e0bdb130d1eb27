"""Pod volumes, materialised on a simulated node the way a kubelet does.

Volumes are materialised under the node's ``var/lib/kubelet/pods/<uid>/volumes`` (ConfigMaps,
Secrets, projected ServiceAccount tokens from the TokenRequest API, downward API files,
emptyDir) or mapped into the node root (hostPath). A missing object raises ``VolumeError``
carrying the kubelet's own message (``MountVolume.SetUp failed ...``), so the pod reports it as
a kubelet would (event ``FailedMount``) and the worker retries. What the pod's containers see
of them is ``environment.container_mounts``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.models.authentication_v1 import BoundObjectReference, TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Secret, ServiceAccount

from compute_domains.infra import atomicfile
from compute_domains.sim.kubelet import environment


class VolumeError(Exception):
    """A volume cannot be set up yet (event reason ``FailedMount``)."""


def _write_files(target: Path, files: dict[str, bytes], mode: int) -> None:
    # Atomic but not fsynced, as the kubelet's AtomicWriter writes them (os.WriteFile, then a
    # symlink swap): these writes run on the node host's event loop, and two fsyncs per file
    # there stalled every kubelet of the process behind the disk (at N = 36, up to seconds
    # while etcd and the plugins' checkpoints were syncing too).
    target.mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        atomicfile.write_atomic(target / rel, data, mode=mode, durable=False)


async def _token(
    client: AsyncClient, ctx: environment.PodContext, audience: str | None, expiration: int | None
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


async def _projected(
    client: AsyncClient, ctx: environment.PodContext, vol: Any
) -> dict[str, bytes]:
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
            obj = await environment.get_object(client, res, ref.name, ns or "")
            if obj is None:
                if ref.optional:
                    continue
                kind = "configmap" if res is ConfigMap else "secret"
                raise VolumeError(f'{kind} "{ref.name}" not found')
            files.update(_select(environment.object_data(obj), ref.items))
        elif src.downwardAPI is not None:
            for item in src.downwardAPI.items or []:
                if item.fieldRef is not None:
                    files[item.path] = environment.field_ref(ctx, item.fieldRef.fieldPath).encode()
    return files


def _select(data: dict[str, bytes], items: list[Any] | None) -> dict[str, bytes]:
    if not items:
        return data
    return {it.path: data[it.key] for it in items if it.key in data}


async def setup_volumes(client: AsyncClient, ctx: environment.PodContext) -> dict[str, str]:
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
            obj = await environment.get_object(
                client, ConfigMap if is_cm else Secret, name, meta.namespace or ""
            )
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
                _write_files(target, _select(environment.object_data(obj), ref.items), 0o644)
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
                it.path: environment.field_ref(ctx, it.fieldRef.fieldPath).encode()
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
