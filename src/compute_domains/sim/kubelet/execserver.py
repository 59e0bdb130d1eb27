"""The kubelet's ``/exec`` endpoint of a simulated node: ``kubectl exec`` into a running container.

The API server asks ``POST /exec/<ns>/<pod>/<container>?command=..&command=..&input=1&output=1
&error=1&tty=1`` with ``Upgrade: SPDY/3.1`` and the stream protocols it speaks
(``X-Stream-Protocol-Version``), as the kubelet's remotecommand server expects: the first of the
client's protocols that is served here (``v4.channel.k8s.io`` down to ``v2``) is chosen, the
connection switches to SPDY (``kubelet.spdy``), and the client's streams arrive (error, then stdin,
stdout, stderr as asked; ``resize`` with a TTY) within 30 s. The command then runs in the
container's view (``Runtime.spawn``: its mount and UTS namespaces, root and environment) with
stdin copied in and stdout/stderr copied out; its end is reported on the error stream: with v4 a
JSON ``metav1.Status``, ``Success`` or ``Failure``/``NonZeroExitCode`` with the exit code as
cause (``kubectl`` exits with it), with v2/v3 only a failure's message. The command and all it
started are killed when the client goes away or the container ends.

Not simulated: a terminal. With ``tty=1`` stderr joins stdout and resize events are read and
dropped; programs see pipes, not a TTY.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from typing import Any

from compute_domains.containers import procs, runtime
from compute_domains.sim.kubelet import spdy

PROTOCOLS = ("v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io")
"""Stream protocols served, most preferred first (the kubelet also serves v1)."""
STREAM_CREATION_TIMEOUT_S = 30.0
"""How long the client may take to open its streams (the kubelet's default)."""


class RequestError(Exception):
    """The request cannot be served; ``status`` and the message make the HTTP answer."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ExecOptions:
    """What an exec request asks for (query parameters, as the kubelet reads them)."""

    command: tuple[str, ...]
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool

    @classmethod
    def from_query(cls, query: dict[str, list[str]]) -> ExecOptions:
        """Parse the query; ``RequestError`` without a command or without any stream."""

        def flag(name: str) -> bool:
            return query.get(name, [""])[0] in ("1", "true")

        # The kubelet's parameter names (``core/v1`` ``Exec*Param``), not the API's.
        opts = cls(
            command=tuple(query.get("command", [])),
            stdin=flag("input"),
            stdout=flag("output"),
            stderr=flag("error"),
            tty=flag("tty"),
        )
        if not opts.command:
            raise RequestError("400 Bad Request", "you must specify at least 1 command")
        if not (opts.stdin or opts.stdout or opts.stderr):
            raise RequestError(
                "400 Bad Request", "you must specify at least 1 of stdin, stdout, stderr"
            )
        return opts

    def streams(self, protocol: str) -> set[str]:
        """The stream types the client opens with this protocol."""
        kinds = {"error"}
        kinds |= {"stdin"} if self.stdin else set()
        kinds |= {"stdout"} if self.stdout else set()
        kinds |= {"stderr"} if self.stderr and not self.tty else set()
        kinds |= {"resize"} if self.tty and protocol != "v2.channel.k8s.io" else set()
        return kinds


def negotiate(offered: list[str]) -> str:
    """The first of the client's protocols served here; ``RequestError`` (403) for none."""
    for protocol in offered:
        if protocol in PROTOCOLS:
            return protocol
    raise RequestError(
        "403 Forbidden",
        f"unable to upgrade: unable to negotiate protocol: client supports {offered}, "
        f"server accepts {list(PROTOCOLS)}",
    )


def status(command: tuple[str, ...], rc: int) -> dict[str, Any]:
    """The ``metav1.Status`` that ends an exec (v4 error stream)."""
    if rc == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            "command terminated with non-zero exit code: "
            f"command '{' '.join(command)}' exited with {rc}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(rc)}]},
    }


async def _copy_out(source: asyncio.StreamReader | None, session: spdy.Session, to: Any) -> None:
    if source is None:
        return
    while chunk := await source.read(1 << 15):
        if to is not None:
            await session.send(to, chunk)


async def _copy_in(stream: spdy.Stream | None, proc: asyncio.subprocess.Process) -> None:
    if stream is None or proc.stdin is None:
        return
    with contextlib.suppress(ConnectionError):
        while (chunk := await stream.incoming.get()) is not None:
            proc.stdin.write(chunk)
            await proc.stdin.drain()
        proc.stdin.close()


async def serve(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    opts: ExecOptions,
    protocol: str,
    running: runtime.Running,
    rt: runtime.Runtime,
) -> None:
    """Switch the connection to SPDY and run one exec (the request was checked already)."""
    writer.write(
        "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
        f"X-Stream-Protocol-Version: {protocol}\r\n\r\n".encode()
    )
    await writer.drain()
    session = spdy.Session(reader, writer)
    streams: dict[str, spdy.Stream] = {}
    expected = opts.streams(protocol)
    opened = asyncio.Event()

    def on_stream(stream: spdy.Stream) -> None:
        streams[stream.headers.get("streamtype", "")] = stream
        if expected <= streams.keys():
            opened.set()

    reading = asyncio.create_task(session.run(on_stream), name="spdy-read")
    try:
        async with asyncio.timeout(STREAM_CREATION_TIMEOUT_S):
            await opened.wait()
        await _run(session, streams, opts, protocol, running, rt, reading)
        await session.goaway()
    except TimeoutError:
        await session.goaway()  # the kubelet gives up too: "timed out waiting for streams"
    finally:
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)


async def _run(
    session: spdy.Session,
    streams: dict[str, spdy.Stream],
    opts: ExecOptions,
    protocol: str,
    running: runtime.Running,
    rt: runtime.Runtime,
    reading: asyncio.Task[None],
) -> None:
    proc = await rt.spawn(running, opts.command, stdin=opts.stdin, merge_stderr=opts.tty)
    out, err = streams.get("stdout"), streams.get("stderr")
    copies = [
        asyncio.create_task(_copy_out(proc.stdout, session, out)),
        asyncio.create_task(_copy_out(proc.stderr, session, err)),
    ]
    feeding = asyncio.create_task(_copy_in(streams.get("stdin"), proc))
    # A resize stream is read and dropped (no terminal here).
    resize = streams.get("resize")
    dropping = asyncio.create_task(resize.read_all()) if resize is not None else None
    ended = asyncio.create_task(proc.wait())
    container_ended = asyncio.ensure_future(running.child.proc.wait())
    try:
        await asyncio.wait({ended, reading, container_ended}, return_when=asyncio.FIRST_COMPLETED)
        if not ended.done():  # the client left, or the container ended: so does the command
            procs.kill_session(proc.pid)
            await ended
            return
        await asyncio.gather(*copies)
        for stream in (out, err):
            if stream is not None:
                await session.send(stream, b"", fin=True)
        report = status(opts.command, ended.result())
        text = (
            json.dumps(report).encode()
            if protocol == PROTOCOLS[0]
            else (report.get("message", "").encode() if ended.result() else b"")
        )
        await session.send(streams["error"], text, fin=True)
    finally:
        procs.kill_session(proc.pid)  # what the command left running in the background
        for task in (*copies, feeding, dropping, ended, container_ended):
            if task is not None:
                task.cancel()
        await asyncio.gather(
            *(t for t in (*copies, feeding, dropping, ended, container_ended) if t),
            return_exceptions=True,
        )
