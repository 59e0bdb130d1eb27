"""Wildcard listeners of simulated containers behave as on separate hosts (``containers.netbind``).

NVIDIA's kubelet plugin listens on ``:51515`` on every node; in the simulator all nodes share
one network namespace, so before the rewrite 17 of 18 plugins failed with ``bind: address
already in use``. Here pods on two nodes, two of them on the same node and one with
``hostNetwork``, each listen on ``0.0.0.0:51515``, a dual-stack ``[::]:51516`` and a Go-style
``[::]:51517`` (``IPV6_V6ONLY=0``, as Go's ``net.Listen("tcp", ":port")``): every bind succeeds,
lands on the pod's own IP (the node's for ``hostNetwork``) and accepts a connection there,
while a second bind of an explicit address still fails with ``EADDRINUSE``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Namespace, Pod, ServiceAccount

from tests.integration.helpers import wait_for

NODE_A, NODE_B = "gb200-r0-n00", "gb200-r0-n01"
PORTS = (51515, 51516, 51517)

pytestmark = pytest.mark.timeout(180)

# Listens on the three wildcards, checks the explicit double bind, says "ready", then answers
# one connection per listener with its pod name and reports who it accepted.
_SERVER = r"""
import errno, os, socket, sys
name = os.environ["POD_NAME"]
v4 = socket.socket()
v4.bind(("0.0.0.0", 51515))
dual = socket.socket(socket.AF_INET6)
dual.bind(("::", 51516))
golike = socket.socket(socket.AF_INET6)
golike.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
golike.bind(("::", 51517))
for s in (v4, dual, golike):
    s.listen()
    s.settimeout(120)
    print("bound", s.getsockname()[0], s.getsockname()[1], flush=True)
ip = v4.getsockname()[0]
first = socket.socket()
first.bind((ip, 51518))
try:
    socket.socket().bind((ip, 51518))
    print("explicit again: bound", flush=True)
except OSError as err:
    print("explicit again:", errno.errorcode[err.errno], flush=True)
print("ready", flush=True)
for s in (v4, dual, golike):
    conn, peer = s.accept()
    conn.sendall(name.encode())
    conn.close()
    print("accepted", s.getsockname()[1], flush=True)
print("done", flush=True)
"""


@pytest.fixture
async def ns(admin: AsyncClient) -> AsyncIterator[str]:
    name = f"nb-{uuid.uuid4().hex[:6]}"
    await admin.create(Namespace.from_dict({"metadata": {"name": name}}))
    await wait_for(admin, ServiceAccount, "default", lambda _: True, namespace=name)
    yield name
    await admin.delete(Namespace, name)


def _server(name: str, ns: str, node: str, host_network: bool = False) -> Pod:
    env = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    container = {
        "name": "c",
        "image": "debian:12",
        "command": ["python3", "-c", _SERVER],
        "env": env,
    }
    spec = {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/hostname": node},
        "hostNetwork": host_network,
        "containers": [container],
    }
    return Pod.from_dict({"metadata": {"name": name, "namespace": ns}, "spec": spec})


async def _until(client: AsyncClient, pod: str, ns: str, text: str) -> list[str]:
    """The pod's log lines, followed until a line equals ``text``."""
    lines: list[str] = []
    async for line in client.log(pod, namespace=ns, follow=True):
        lines.append(line.rstrip("\n"))
        if lines[-1] == text:
            return lines
    raise AssertionError(f"{pod}: log ended before {text!r}: {lines}")


async def _ask(ip: str, port: int) -> str:
    """Connect to ``ip:port``; what the listener there says (its pod's name)."""
    reader, writer = await asyncio.open_connection(ip, port)
    try:
        return (await reader.read()).decode()
    finally:
        writer.close()
        await writer.wait_closed()


async def test_wildcard_listeners_of_pods_on_different_and_same_nodes_do_not_collide(
    admin: AsyncClient, ns: str
) -> None:
    pods = {
        "a-on-n00": _server("a-on-n00", ns, NODE_A),
        "b-on-n01": _server("b-on-n01", ns, NODE_B),
        "c-on-n00": _server("c-on-n00", ns, NODE_A),
        "host-on-n01": _server("host-on-n01", ns, NODE_B, host_network=True),
    }
    for pod in pods.values():
        await admin.create(pod)
    ips: dict[str, str] = {}
    for name in pods:
        running = await wait_for(
            admin,
            Pod,
            name,
            lambda p: bool(p.status and p.status.phase == "Running" and p.status.podIP),
            namespace=ns,
        )
        assert running.status is not None and running.status.podIP
        ips[name] = running.status.podIP
        lines = await asyncio.wait_for(_until(admin, name, ns, "ready"), 60)
        # Each wildcard landed on this pod's own address; the explicit double bind still fails.
        ip = ips[name]
        assert lines == [
            f"bound {ip} 51515",
            f"bound ::ffff:{ip} 51516",
            f"bound ::ffff:{ip} 51517",
            "explicit again: EADDRINUSE",
            "ready",
        ], (name, lines)
    assert len(set(ips.values())) == len(pods), ips
    node_b = await admin.get(Pod, "b-on-n01", namespace=ns)
    assert node_b.status is not None
    assert ips["host-on-n01"] == node_b.status.hostIP  # hostNetwork: the node's address
    # Every pod answers on its own IP, on each port: no listener shadows another pod's.
    for name, ip in ips.items():
        for port in PORTS:
            assert await asyncio.wait_for(_ask(ip, port), 30) == name, (name, port)
    for name in pods:
        done = await wait_for(
            admin,
            Pod,
            name,
            lambda p: bool(p.status and p.status.phase in ("Succeeded", "Failed")),
            namespace=ns,
        )
        assert done.status is not None and done.status.phase == "Succeeded", name
        lines = [line.rstrip("\n") async for line in admin.log(name, namespace=ns)]
        assert lines[-4:] == [*(f"accepted {port}" for port in PORTS), "done"], (name, lines)
