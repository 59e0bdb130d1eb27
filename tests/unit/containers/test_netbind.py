"""Wildcard binds of a confined process land on its own address (``containers.netbind``).

The pure parts are table-driven: the BPF program run by a small classic-BPF interpreter, the
parsing of raw sockaddrs as the kernel reads them, and where a wildcard is bound instead. The
last tests confine real processes (root, as the simulator's containers run): two of them bind
the same wildcard ports side by side, each on its own address, and the supervisor neither
holds the runtime's exec pipe open nor outlives the process it serves.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from compute_domains.containers import netbind

_X86_64, _I386 = 0xC000003E, 0x40000003
_BIND, _LISTEN = 49, 50


def _run_bpf(prog: list[netbind.Insn], nr: int, arch: int) -> int:
    """Run a classic BPF program over ``struct seccomp_data`` (only the opcodes it may use)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, *([0] * 6))
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        pc += 1
        if code == netbind.LD_W_ABS:
            (acc,) = struct.unpack_from("=I", data, k)
        elif code == netbind.JEQ_K:
            pc += jt if acc == k else jf
        elif code == netbind.JGE_K:
            pc += jt if acc >= k else jf
        elif code == netbind.RET_K:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


@pytest.mark.parametrize(
    ("nr", "arch", "expected"),
    [
        (_BIND, _X86_64, netbind.RET_USER_NOTIF),
        (_LISTEN, _X86_64, netbind.RET_ALLOW),
        (0, _X86_64, netbind.RET_ALLOW),
        (0x40000000 | _BIND, _X86_64, netbind.RET_ALLOW),  # x32's bind
        (_BIND, _I386, netbind.RET_ALLOW),  # i386's syscall 49 is not bind
        (361, _I386, netbind.RET_ALLOW),  # i386's bind: not rewritten
    ],
)
def test_the_filter_notifies_only_x86_64_binds(nr: int, arch: int, expected: int) -> None:
    assert _run_bpf(netbind.program(), nr, arch) == expected


def _in4(port: int, addr: str, family: int = socket.AF_INET) -> bytes:
    return struct.pack("=H", family) + struct.pack("!H", port) + socket.inet_aton(addr) + bytes(8)


def _in6(port: int, addr: str) -> bytes:
    packed = socket.inet_pton(socket.AF_INET6, addr)
    return struct.pack("=H", socket.AF_INET6) + struct.pack("!HI", port, 0) + packed + bytes(4)


_W = netbind.Wildcard


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (_in4(51515, "0.0.0.0"), _W(socket.AF_INET, 51515)),
        (_in4(0, "0.0.0.0"), _W(socket.AF_INET, 0)),
        (_in4(51515, "127.0.0.1"), None),
        (_in4(51515, "127.64.0.2"), None),
        (_in4(51515, "0.0.0.0")[:15], None),  # shorter than sockaddr_in: the kernel's EINVAL
        (_in4(80, "0.0.0.0", socket.AF_UNSPEC), _W(socket.AF_INET, 80)),  # old INADDR_ANY
        (_in4(80, "127.0.0.1", socket.AF_UNSPEC), None),
        (_in6(51516, "::"), _W(socket.AF_INET6, 51516)),
        (_in6(51516, "::")[:24], _W(socket.AF_INET6, 51516)),  # RFC 2133 length, no scope
        (_in6(51516, "::")[:23], None),
        (_in6(51516, "::1"), None),
        (_in6(51516, "::ffff:0.0.0.0"), _W(socket.AF_INET6, 51516, mapped=True)),
        (_in6(51516, "::ffff:127.0.0.1"), None),
        (struct.pack("=H", socket.AF_UNIX) + b"/run/x.sock\0", None),
        (struct.pack("=H", socket.AF_UNIX) + bytes(14), None),
        (b"\x02", None),
        (b"", None),
    ],
)
def test_parse_finds_wildcards_as_the_kernel_reads_them(
    raw: bytes, expected: netbind.Wildcard | None
) -> None:
    assert netbind.parse(raw) == expected


@pytest.mark.parametrize(
    ("wild", "v6only", "expected"),
    [
        (_W(socket.AF_INET, 51515), False, (("127.64.0.2", 51515), False)),
        (_W(socket.AF_INET6, 51516), False, (("::ffff:127.64.0.2", 51516, 0, 0), False)),
        (_W(socket.AF_INET6, 7, mapped=True), False, (("::ffff:127.64.0.2", 7, 0, 0), False)),
        (_W(socket.AF_INET6, 51516), True, (("fd63:6473:696d::7f40:2", 51516, 0, 0), True)),
        (_W(socket.AF_INET6, 7, mapped=True), True, None),  # V6ONLY refuses it: the kernel's
    ],
)
def test_a_wildcard_is_bound_to_the_containers_own_address(
    wild: netbind.Wildcard,
    v6only: bool,
    expected: tuple[tuple[str | int, ...], bool] | None,
) -> None:
    assert netbind.target(wild, "127.64.0.2", v6only) == expected


_CONFINED = r"""
import asyncio, errno, os, socket, sys, threading
from compute_domains.containers import netbind

address, pipe_w = sys.argv[1], int(sys.argv[2])
netbind.confine(address)
os.close(pipe_w)  # as the exec closes the runtime's pipe: only the supervisor could hold it now
out = []
v4 = socket.socket()
v4.bind(("0.0.0.0", 51515))
v4.listen()
out.append(f"v4 {v4.getsockname()[0]}")
dual = socket.socket(socket.AF_INET6)
dual.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
dual.bind(("::", 51516))
dual.listen()
out.append(f"dual {dual.getsockname()[0]}")
def in_thread():  # a bind from a thread that is not the thread-group leader
    t = socket.socket()
    t.bind(("0.0.0.0", 51517))
    out.append(f"thread {t.getsockname()[0]}")
th = threading.Thread(target=in_thread)
th.start()
th.join()
async def both():  # asyncio's host=None: 0.0.0.0 and a V6ONLY [::]
    srv = await asyncio.start_server(lambda r, w: None, None, 51518)
    out.append("asyncio " + " ".join(sorted(str(s.getsockname()[0]) for s in srv.sockets)))
    srv.close()
asyncio.run(both())
try:
    socket.socket().bind((address, 51515))
except OSError as err:
    out.append(f"explicit {errno.errorcode[err.errno]}")
u = socket.socket(socket.AF_UNIX)
u.bind("\0netbind-test-" + address)
out.append("unix ok")
with socket.create_connection((address, 51516)) as c:
    out.append(f"dial {c.getpeername()[0]}")
print("\n".join(out), flush=True)
children = open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split()
print("supervisor", *children, flush=True)
sys.stdin.read()  # the test ends us by closing stdin
"""


def _confined(address: str, pipe_w: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _CONFINED, address, str(pipe_w)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        pass_fds=(pipe_w,),
        cwd=Path(__file__).parents[3],
    )


def _lines_until_supervisor(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.strip())
        if line.startswith("supervisor"):
            return lines
    raise AssertionError(f"confined process ended early: {lines}")


def test_two_confined_processes_bind_the_same_wildcards_each_on_its_own_address() -> None:
    procs, pipes = [], []
    for address in ("127.0.0.77", "127.0.0.78"):
        r, w = os.pipe()
        procs.append(_confined(address, w))
        os.close(w)
        pipes.append(r)
    try:
        outputs = [_lines_until_supervisor(p) for p in procs]
        for address, lines in zip(("127.0.0.77", "127.0.0.78"), outputs, strict=True):
            assert lines[:-1] == [
                f"v4 {address}",
                f"dual ::ffff:{address}",
                f"thread {address}",
                f"asyncio {address} fd63:6473:696d::{_hex_tail(address)}",
                "explicit EADDRINUSE",
                "unix ok",
                f"dial {address}",
            ]
        # The runtime's exec pipe reads EOF while the processes run: no supervisor holds it.
        for r in pipes:
            assert select.select([r], [], [], 10)[0] == [r]
            assert os.read(r, 1) == b""
        supervisors = [int(lines[-1].split()[1]) for lines in outputs]
        watch = [os.pidfd_open(pid) for pid in supervisors]
    finally:
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
            p.wait(10)
            assert p.stdout is not None
            p.stdout.close()
        for r in pipes:
            os.close(r)
    # Each supervisor ends with the process it served.
    for fd in watch:
        assert select.select([fd], [], [], 10)[0] == [fd]
        os.close(fd)


def _hex_tail(address: str) -> str:
    a, b, c, d = (int(x) for x in address.split("."))
    return f"{a << 8 | b:x}:{c << 8 | d:x}"
