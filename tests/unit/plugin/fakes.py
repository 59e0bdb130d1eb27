"""Plain-data stand-ins for the plugin's unit tests (no Kubernetes API anywhere)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from lightkube import ALL_NS

from compute_domains.api import names, sharedimex
from compute_domains.api.computedomain import ComputeDomain
from compute_domains.infra import errors
from compute_domains.plugin import computedomain, configs, edits, state
from compute_domains.plugin.config import PathSettings, RetrySettings

NODE = "node-a"
CLIQUE = "8f0e6c1a-3b2d-4e5f-9a8b-7c6d5e4f3a2b.7"
CHANNEL_MAJOR = 238
CAPS_MAJOR = 239


def compute_domain(
    uid: str, namespace: str = "ns", name: str = "cd", scope: str | None = None
) -> ComputeDomain:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    if scope is not None:
        meta["annotations"] = {sharedimex.SCOPE_ANNOTATION: scope}
    return ComputeDomain.from_dict(
        {
            "apiVersion": names.API_VERSION,
            "kind": names.COMPUTE_DOMAIN_KIND,
            "metadata": meta,
            "spec": {"channel": {"resourceClaimTemplate": {"name": "t"}}},
        }
    )


def channel_config(domain: str, mode: str = "Single", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.CHANNEL_CONFIG_KIND,
        "domainID": domain,
        "allocationMode": mode,
        **extra,
    }


def daemon_config(domain: str) -> dict[str, Any]:
    return {"apiVersion": names.API_VERSION, "kind": names.DAEMON_CONFIG_KIND, "domainID": domain}


def config_entry(
    params: dict[str, Any], *, source: str = "FromClaim", requests: tuple[str, ...] = ()
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "source": source,
        "opaque": {"driver": names.DRIVER_NAME, "parameters": params},
    }
    if requests:
        entry["requests"] = list(requests)
    return entry


def result(device: str, request: str = "channel", **extra: Any) -> dict[str, Any]:
    return {
        "request": request,
        "driver": names.DRIVER_NAME,
        "pool": NODE,
        "device": device,
        **extra,
    }


def claim(
    uid: str,
    results: list[dict[str, Any]],
    config: list[dict[str, Any]],
    *,
    namespace: str = "ns",
    name: str | None = None,
    rv: str = "1",
) -> configs.Claim:
    status = {"allocation": {"devices": {"results": results, "config": config}}}
    return configs.Claim(
        uid=uid,
        namespace=namespace,
        name=name or f"claim-{uid}",
        resource_version=rv,
        status=json.loads(json.dumps(status)),
    )


class FakeDomains:
    """An in-memory ``DomainPort``: CDs by UID, one node label, scripted readiness."""

    def __init__(self, *cds: ComputeDomain) -> None:
        self.cds = {cd.uid: cd for cd in cds}
        self.node_label = ""
        self.ready: set[str] = set()
        self.became_ready = asyncio.Event()
        self.waiting = asyncio.Event()
        """Set once a prepare waits on readiness (what a test waits for, not a sleep)."""
        self.label_writes = 0

    async def find(self, domain_uid: str, namespace: str = ALL_NS) -> ComputeDomain | None:
        cd = self.cds.get(domain_uid)
        if cd is None or namespace not in (ALL_NS, cd.namespace):
            return None
        return cd

    async def for_channel(self, domain_uid: str, claim_namespace: str) -> ComputeDomain:
        cd = self.cds.get(domain_uid)
        if cd is None:
            raise errors.PermanentError(f"ComputeDomain with UID {domain_uid} not found")
        if cd.namespace != claim_namespace:
            raise errors.PermanentError("ComputeDomain is in another namespace than the claim")
        return cd

    async def for_daemon(self, domain_uid: str) -> ComputeDomain:
        cd = self.cds.get(domain_uid)
        if cd is None:
            raise errors.TemporaryError(f"compute domain not found: {domain_uid}")
        return cd

    async def label(self, cd: ComputeDomain) -> bool:
        if self.node_label == cd.uid:
            return False
        if self.node_label:
            raise computedomain.NodeHeldError(f"held by {self.node_label}")
        self.node_label = cd.uid
        self.label_writes += 1
        return True

    async def unlabel(self, domain_uid: str) -> bool:
        if self.node_label != domain_uid:
            return False
        self.node_label = ""
        return True

    async def label_value(self) -> str:
        return self.node_label

    async def wait_ready(self, cd: ComputeDomain, clique_id: str, timeout: float) -> None:
        self.waiting.set()
        try:
            async with asyncio.timeout(timeout):
                while cd.uid not in self.ready:
                    await self.became_ready.wait()
                    self.became_ready.clear()
        except TimeoutError as err:
            raise errors.TemporaryError("current node not ready in ComputeDomain") from err

    def make_ready(self, domain_uid: str) -> None:
        self.ready.add(domain_uid)
        self.became_ready.set()


class FakeShared:
    """An in-memory ``SharedPort``: one clique registry's annotations, the Node's channel
    annotations and shared-IMEX label (refused while ``domains`` has a CD label), readiness."""

    def __init__(self, domains: FakeDomains) -> None:
        self.domains = domains
        self.registry: dict[str, str] = {}
        self.node_annotations: dict[str, str] = {}
        self.label = False
        self.ready = True
        self.waiting = asyncio.Event()
        self.became_ready = asyncio.Event()
        self.cliques: list[str] = []
        """The clique of every ``allocate``."""
        self.followed: list[str] = []
        """The clique of every ``following`` opened."""
        self.open_followers = 0
        self.allocated_while_following: list[bool] = []
        self.waited_while_following: list[bool] = []

    @contextlib.asynccontextmanager
    async def following(self, clique_id: str) -> AsyncIterator[None]:
        self.followed.append(clique_id)
        self.open_followers += 1
        try:
            yield
        finally:
            self.open_followers -= 1

    async def allocate(self, clique_id: str, cd: ComputeDomain) -> int:
        self.cliques.append(clique_id)
        self.allocated_while_following.append(self.open_followers > 0)
        try:
            channel, new = sharedimex.allocate(self.registry, cd.uid)
        except sharedimex.ChannelsExhaustedError as err:
            raise errors.TemporaryError(str(err)) from err
        if new:
            self.registry[sharedimex.channel_key(cd.uid)] = str(channel)
        return channel

    async def wait_ready(self, cd: ComputeDomain, clique_id: str, timeout: float) -> None:
        self.waited_while_following.append(self.open_followers > 0)
        self.waiting.set()
        try:
            async with asyncio.timeout(timeout):
                while not self.ready:
                    await self.became_ready.wait()
                    self.became_ready.clear()
        except TimeoutError as err:
            raise errors.TemporaryError("the node's shared IMEX is not Ready yet") from err

    def make_ready(self) -> None:
        self.ready = True
        self.became_ready.set()

    def _refuse_if_held(self) -> None:
        if self.domains.node_label:
            raise computedomain.NodeHeldError(f"held by {self.domains.node_label} (perDomain)")

    async def attach(self, cd: ComputeDomain, channel: int) -> None:
        self._refuse_if_held()
        self.node_annotations[sharedimex.channel_key(cd.uid)] = str(channel)
        self.label = True

    async def detach(self, domain_uid: str) -> None:
        self.node_annotations.pop(sharedimex.channel_key(domain_uid), None)

    async def join(self) -> bool:
        self._refuse_if_held()
        written, self.label = not self.label, True
        return written

    async def leave(self) -> bool:
        removed, self.label = self.label, False
        return removed

    async def node_channels(self) -> dict[str, int]:
        return sharedimex.channels(self.node_annotations)


def paths(root: Path, **extra: Any) -> PathSettings:
    return PathSettings(host_root=root, fabric_imex_mgmt=root / "fabric-imex-mgmt", **extra)


def device_state(
    root: Path,
    domains: FakeDomains,
    *,
    clique_id: str = CLIQUE,
    slots: int = 4,
    holders: list[str] | None = None,
    shared: FakeShared | None = None,
    on_holder_change: Callable[[str], None] | None = None,
    **path_extra: Any,
) -> state.DeviceState:
    facts = edits.NodeFacts(clique_id=clique_id, channel_major=CHANNEL_MAJOR, caps_major=CAPS_MAJOR)
    return state.DeviceState(
        node=NODE,
        paths=paths(root, **path_extra),
        retry=RetrySettings(lock_timeout_s=1.0),
        facts=facts,
        domains=domains,
        shared_imex=shared if shared is not None else FakeShared(domains),
        channel_slots=slots,
        on_holder_change=(
            on_holder_change or (holders.append if holders is not None else lambda _u: None)
        ),
    )
