"""SPDY/3.1, server side, as much as Kubernetes' streaming (``exec``) uses of it.

The API server reaches a kubelet's ``/exec`` endpoint over SPDY: ``kubectl exec`` speaks
WebSockets (``v5.channel.k8s.io``) to the API server, whose stream translator (feature
``TranslateStreamCloseWebsocketRequests``, on since 1.30) opens SPDY streams to the kubelet, and
``kubectl``'s SPDY fallback is proxied through unchanged. After the HTTP upgrade the client
opens one stream per channel (``SYN_STREAM`` with a ``streamtype`` header); ``Session`` hands
each to the caller, answers it (``SYN_REPLY``), carries ``DATA`` both ways (``FIN`` closes a
direction), answers ``PING`` and ends with ``GOAWAY``.

Header blocks are zlib streams, one per direction for the whole session, primed with the
protocol's dictionary (SPDY/3 §2.6.10.1, a constant of the protocol). Flow control is not
applied (Kubernetes' SPDY library does not apply it either); ``SETTINGS`` and ``WINDOW_UPDATE``
are read and ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import struct
import zlib
from collections.abc import Callable

_VERSION = 3
_SYN_STREAM, _SYN_REPLY, _RST_STREAM, _PING, _GOAWAY, _HEADERS = 1, 2, 3, 6, 7, 8
_FLAG_FIN = 0x01
_MAX_DATA = 1 << 15
"""Largest DATA payload written at once."""

_DICTIONARY_WORDS = (
    "options head post put delete trace accept accept-charset accept-encoding accept-language "
    "accept-ranges age allow authorization cache-control connection content-base "
    "content-encoding content-language content-length content-location content-md5 "
    "content-range content-type date etag expect expires from host if-match if-modified-since "
    "if-none-match if-range if-unmodified-since last-modified location max-forwards pragma "
    "proxy-authenticate proxy-authorization range referer retry-after server te trailer "
    "transfer-encoding upgrade user-agent vary via warning www-authenticate method get status "
    "200\x00OK version HTTP/1.1 url public set-cookie keep-alive origin"
)
_DICTIONARY_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 "
    "Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 "
    "Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, "
    "Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,"
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age="
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)


def dictionary() -> bytes:
    """The SPDY/3 header compression dictionary: length-prefixed words, then a tail."""
    out = b"".join(
        struct.pack(">I", len(w)) + w.replace("\x00", " ").encode()
        for w in _DICTIONARY_WORDS.split(" ")
    )
    return out + _DICTIONARY_TAIL.encode()


def encode_headers(headers: dict[str, str]) -> bytes:
    """An uncompressed SPDY/3 name/value block (names lower-case)."""
    out = [struct.pack(">I", len(headers))]
    for name, value in headers.items():
        for part in (name.lower().encode(), value.encode()):
            out.append(struct.pack(">I", len(part)) + part)
    return b"".join(out)


def decode_headers(block: bytes) -> dict[str, str]:
    """Parse an uncompressed name/value block; repeated values are joined by NUL."""
    (count,), pos, out = struct.unpack_from(">I", block), 4, {}
    for _ in range(count):
        parts = []
        for _ in range(2):
            (size,) = struct.unpack_from(">I", block, pos)
            parts.append(block[pos + 4 : pos + 4 + size].decode(errors="replace"))
            pos += 4 + size
        out[parts[0]] = parts[1]
    return out


def control_frame(kind: int, flags: int, payload: bytes) -> bytes:
    """A control frame of this SPDY version."""
    return struct.pack(">HHI", 0x8000 | _VERSION, kind, flags << 24 | len(payload)) + payload


def data_frame(stream_id: int, data: bytes, fin: bool = False) -> bytes:
    """A DATA frame."""
    flags = _FLAG_FIN if fin else 0
    return struct.pack(">II", stream_id & 0x7FFFFFFF, flags << 24 | len(data)) + data


@dataclasses.dataclass(slots=True)
class Stream:
    """One stream the client opened: its headers and what it sends (None: it finished)."""

    id: int
    headers: dict[str, str]
    incoming: asyncio.Queue[bytes | None] = dataclasses.field(default_factory=asyncio.Queue)

    async def read_all(self) -> bytes:
        """Everything the client sends on this stream, until it finishes it."""
        parts = []
        while (chunk := await self.incoming.get()) is not None:
            parts.append(chunk)
        return b"".join(parts)


class Session:
    """A SPDY session over an upgraded connection; ``run`` reads until the client is gone."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._inflate = zlib.decompressobj(zdict=dictionary())
        self._deflate = zlib.compressobj(zdict=dictionary())
        self._streams: dict[int, Stream] = {}

    async def run(self, on_stream: Callable[[Stream], None]) -> None:
        """Read frames; each new stream goes to ``on_stream`` once answered. Returns when the
        client closes the connection or says GOAWAY."""
        try:
            while True:
                head = await self._reader.readexactly(8)
                word, flags_len = struct.unpack(">II", head)
                flags, length = flags_len >> 24, flags_len & 0xFFFFFF
                payload = await self._reader.readexactly(length)
                if word & 0x80000000:
                    if not await self._control(word & 0xFFFF, flags, payload, on_stream):
                        return
                else:
                    self._data(word & 0x7FFFFFFF, flags, payload)
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            for stream in self._streams.values():
                stream.incoming.put_nowait(None)

    async def _control(
        self, kind: int, flags: int, payload: bytes, on_stream: Callable[[Stream], None]
    ) -> bool:
        if kind == _SYN_STREAM:
            (sid,) = struct.unpack_from(">I", payload)
            headers = decode_headers(self._inflate.decompress(payload[10:]))
            stream = self._streams[sid & 0x7FFFFFFF] = Stream(sid & 0x7FFFFFFF, headers)
            if flags & _FLAG_FIN:
                stream.incoming.put_nowait(None)
            block = self._deflate.compress(encode_headers({})) + self._deflate.flush(
                zlib.Z_SYNC_FLUSH
            )
            await self._send(control_frame(_SYN_REPLY, 0, struct.pack(">I", stream.id) + block))
            on_stream(stream)
        elif kind in (_SYN_REPLY, _HEADERS):
            self._inflate.decompress(payload[4:])  # keeps the shared zlib state in step
        elif kind == _RST_STREAM:
            (sid,) = struct.unpack_from(">I", payload)
            if (reset := self._streams.get(sid & 0x7FFFFFFF)) is not None:
                reset.incoming.put_nowait(None)
        elif kind == _PING:
            await self._send(control_frame(_PING, 0, payload))
        elif kind == _GOAWAY:
            return False
        return True  # SETTINGS, WINDOW_UPDATE and unknown kinds: nothing to do

    def _data(self, sid: int, flags: int, payload: bytes) -> None:
        stream = self._streams.get(sid)
        if stream is None:
            return
        if payload:
            stream.incoming.put_nowait(payload)
        if flags & _FLAG_FIN:
            stream.incoming.put_nowait(None)

    async def _send(self, frame: bytes) -> None:
        self._writer.write(frame)
        await self._writer.drain()

    async def send(self, stream: Stream, data: bytes, *, fin: bool = False) -> None:
        """Send ``data`` on ``stream``; ``fin`` finishes our direction of it."""
        for start in range(0, max(len(data), 1), _MAX_DATA):
            chunk = data[start : start + _MAX_DATA]
            last = start + _MAX_DATA >= len(data)
            await self._send(data_frame(stream.id, chunk, fin and last))

    async def goaway(self) -> None:
        """Tell the client the session is over (no stream is left to serve)."""
        last = max(self._streams, default=0)
        with contextlib.suppress(ConnectionError):
            await self._send(control_frame(_GOAWAY, 0, struct.pack(">II", last, 0)))
