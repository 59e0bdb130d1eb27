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
    HTTPHeader,
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


async def test_http_probes_open_a_connection_each_and_send_what_the_kubelet_sends() -> None:
    """As the kubelet's prober (keep-alives off): every probe is a new connection, closed by
    the prober once it has the answer; ``kube-probe`` user agent, the probe's own headers."""
    requests: list[bytes] = []
    finished: list[int] = []
    all_finished = asyncio.Event()
    answers = iter([b"200 OK", b"302 Found", b"503 Service Unavailable", b"200 OK"])

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            requests.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(b"HTTP/1.1 " + next(answers) + b"\r\nContent-Length: 3\r\n\r\nok\n")
            await writer.drain()
            await reader.read()  # until the prober closes its side
        finally:
            writer.close()
            await writer.wait_closed()
            finished.append(1)
            if len(finished) == 4:
                all_finished.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    probe = Probe(
        httpGet=HTTPGetAction(
            path="/healthz", port=port, httpHeaders=[HTTPHeader(name="X-Check", value="1")]
        ),
        periodSeconds=0,
    )
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
        assert await prober._check(probe)  # 200
        assert await prober._check(probe)  # 302: a redirect counts as success
        assert not await prober._check(probe)  # 503
        await prober.run()  # ends after the startup probe's success
        await all_finished.wait()  # four probes, four connections, each closed by the prober
        assert len(requests) == 4
        head = requests[0].decode()
        assert head.startswith("GET /healthz HTTP/1.1\r\n")
        assert f"Host: 127.0.0.1:{port}\r\n" in head
        assert "User-Agent: kube-probe/" in head and "Connection: close" in head
        assert "X-Check: 1\r\n" in head
    finally:
        server.close()
        await server.wait_closed()


async def test_an_http_probe_without_an_answer_fails_within_its_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()  # never answers; returns when the prober hangs up
        finally:
            writer.close()
            await writer.wait_closed()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        started = asyncio.get_running_loop().time()
        assert await probes.http_get_status("127.0.0.1", port, "/", [], 0.3) is None
        assert asyncio.get_running_loop().time() - started < 5
        assert await probes.http_get_status("127.0.0.1", 1, "/", [], 0.3) is None  # refused
    finally:
        server.close()
        await server.wait_closed()
