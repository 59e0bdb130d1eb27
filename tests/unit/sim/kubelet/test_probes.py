"""Exec probes run the command the kubelet would: ``$(VAR)`` expanded from the static env."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import cast

from lightkube.models.core_v1 import (
    Container,
    EnvVar,
    EnvVarSource,
    ExecAction,
    HTTPGetAction,
    ObjectFieldSelector,
    Probe,
)

from compute_domains.containers import runtime
from compute_domains.sim.kubelet import podstatus, probes


class _Runtime:
    """Records what an exec probe runs and answers success."""

    def __init__(self) -> None:
        self.ran: list[list[str]] = []

    async def exec(self, running: object, argv: Sequence[str], timeout: float) -> tuple[int, str]:
        self.ran.append(list(argv))
        return 0, ""


def _container(command: list[str]) -> Container:
    return Container(
        name="c",
        env=[
            EnvVar(name="LOG_VERBOSITY", value="4"),
            EnvVar(name="NESTED", value="$(LOG_VERBOSITY)x"),
            EnvVar(
                name="POD_NAME",
                valueFrom=EnvVarSource(fieldRef=ObjectFieldSelector(fieldPath="metadata.name")),
            ),
        ],
        startupProbe=Probe(exec=ExecAction(command=command), periodSeconds=1),
    )


async def test_exec_probe_command_is_expanded_from_the_static_env() -> None:
    """NVIDIA's daemon probe is ``compute-domain-daemon -v $(LOG_VERBOSITY) check``: run
    unexpanded, the flag parse fails and the daemon never turns Ready. Like the kubelet, values
    are taken as written (``NESTED`` is not expanded again) and a ``valueFrom`` entry is empty."""
    c = _container(
        ["check", "-v", "$(LOG_VERBOSITY)", "$(NESTED)", "[$(POD_NAME)]", "$$(X)", "$(NOPE)"]
    )
    rt = _Runtime()
    rec = podstatus.ContainerRecord(name="c", image="i")
    prober = probes.Prober(
        cast(runtime.Runtime, rt),
        cast(runtime.Running, None),
        c,
        rec,
        lambda: None,
        logging.LoggerAdapter(logging.getLogger("test")),
    )
    await prober.run()  # a startup probe alone: ends after its first success
    assert rt.ran == [
        ["check", "-v", "4", "$(LOG_VERBOSITY)x", "[]", "$(X)", "$(NOPE)"],
    ]
    assert rec.started


async def test_http_probes_share_one_client_and_open_a_connection_each() -> None:
    """As the kubelet's prober (keep-alives off): every probe is a new connection, but the
    probing side is built once per container, not once per probe."""
    connections: list[int] = []
    finished: list[int] = []
    all_finished = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            await reader.read()  # until the prober closes its side
        finally:
            writer.close()
            await writer.wait_closed()
            finished.append(1)
            if len(finished) == 3:
                all_finished.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    probe = Probe(httpGet=HTTPGetAction(path="/healthz", port=port), periodSeconds=0)
    c = Container(name="c", startupProbe=probe)
    prober = probes.Prober(
        cast(runtime.Runtime, _Runtime()),
        cast(runtime.Running, None),
        c,
        podstatus.ContainerRecord(name="c", image="i"),
        lambda: None,
        logging.LoggerAdapter(logging.getLogger("test")),
    )
    try:
        assert await prober._check(probe)
        client = prober._http
        assert client is not None
        assert await prober._check(probe)
        assert prober._http is client
        assert len(connections) == 2
        await prober.run()  # ends after the startup probe's success, closing the client
        assert prober._http is None and client.is_closed
        await all_finished.wait()  # three probes, three connections, each closed by the prober
        assert len(connections) == 3
    finally:
        server.close()
        await server.wait_closed()
