"""Wildcard binds of a simulated container land on the container's own address.

Why: every simulated node and pod shares this machine's one network namespace, while on real
hosts each node (and each pod without ``hostNetwork``) has its own. A program that listens on
the wildcard address collides with its copies on the other simulated nodes: NVIDIA's kubelet
plugin listens on ``:51515`` (Go's dual-stack ``[::]``), so 17 of 18 plugins crash-loop with
``bind: address already in use``. Separate network namespaces would need interfaces and
routes, and the simulator must not change this machine's network (loopback only, no new
interfaces), so the bind itself is rewritten instead, at the syscall level, which covers any
program (Go's static binaries included).

How: ``confine(address)`` forks a supervisor first (it must not be under the filter: it
performs binds itself), then installs a seccomp filter on the calling process that turns the
``bind`` syscall into a user notification (``SECCOMP_RET_USER_NOTIF``) and allows everything
else; every process the container forks inherits the filter. The supervisor reads each bind's
address from the caller's memory. A wildcard (``0.0.0.0``, ``::``, ``::ffff:0.0.0.0``) is bound
by the supervisor on the caller's socket (``pidfd_getfd``) to the container's address instead,
and the caller gets that bind's result; every other bind continues in the kernel unchanged
(``SECCOMP_USER_NOTIF_FLAG_CONTINUE``). Invariants and choices:

* ``0.0.0.0:P`` becomes ``<address>:P``; a dual-stack ``[::]:P`` becomes ``[::ffff:<address>]:P``
  (IPv4 only, as the sim has no per-pod IPv6 address).
* An ``IPV6_V6ONLY`` ``[::]:P`` (asyncio's ``start_server(host=None)`` opens one beside its
  ``0.0.0.0:P`` socket) is bound, with ``IPV6_FREEBIND``, to an address of ours that no
  interface has (``fd63:6473:696d::<address>``): reachable by nothing, like the IPv6 side of a
  pod in an IPv4 cluster, and unique per container, where ``::1`` would collide again.
* Consequence: a client inside the container that dials ``127.0.0.1:P`` or ``[::1]:P`` reaches
  nothing, unlike on a real host; the pod IP works (the kubelet's probes use it).
* The supervisor binds with its own (root) privileges, so ports below 1024 work for any user,
  as containerd's default ``ip_unprivileged_port_start=0`` allows in real pods.
* Not covered: 32-bit and x32 programs (allowed, not rewritten), io_uring binds, and processes
  started by ``kubectl exec`` or exec probes (they enter with ``nsenter``, without the filter).
* The supervisor dies with the container's first process (parent-death signal) and lives in
  its session, so ending the container ends it; it exits once the filter has no users left.

Size: about 320 lines for one mechanism; the seccomp and BPF structures it declares have no other
user, and split from the supervisor that reads them they would be harder to check.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import fcntl
import ipaddress
import os
import select
import signal
import socket
import struct
import sys
from pathlib import Path

_NR_BIND, _NR_SECCOMP, _NR_PIDFD_GETFD = 49, 317, 438  # x86_64
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_SECCOMP_SET_MODE_FILTER = 1
_FLAG_NEW_LISTENER = 1 << 3
_FLAG_WAIT_KILLABLE_RECV = 1 << 5
"""Once received, the caller ignores non-fatal signals until answered (Go's runtime signals
its threads all the time; an interrupted, restarted bind would otherwise be bound twice)."""
RET_ALLOW, RET_USER_NOTIF = 0x7FFF0000, 0x7FC00000
_NOTIF_FLAG_CONTINUE = 1
# Classic BPF opcodes: load word at absolute offset, jump if equal / greater-or-equal, return.
LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
OFF_NR, OFF_ARCH = 0, 4
"""Offsets of ``nr`` and ``arch`` in ``struct seccomp_data``."""
_PR_SET_PDEATHSIG, _PR_SET_NAME = 1, 15
_IPV6_FREEBIND = 78
_V6_UNREACHABLE = int(ipaddress.IPv6Address("fd63:6473:696d::"))
"""ULA prefix (global id "cdsim") for V6ONLY wildcards; the IPv4 address fills the low bits."""
_MAX_SOCKADDR = 128
"""``sizeof(struct sockaddr_storage)``: the kernel refuses longer addresses (EINVAL)."""


_u8, _u16, _u32, _u64 = ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64


class _SeccompData(ctypes.Structure):
    _fields_ = [("nr", ctypes.c_int32), ("arch", _u32), ("ip", _u64), ("args", _u64 * 6)]


class _Notif(ctypes.Structure):  # struct seccomp_notif
    _fields_ = [("id", _u64), ("pid", _u32), ("flags", _u32), ("data", _SeccompData)]


class _Resp(ctypes.Structure):  # struct seccomp_notif_resp
    _fields_ = [("id", _u64), ("val", ctypes.c_int64), ("error", ctypes.c_int32), ("flags", _u32)]


class _SockFilter(ctypes.Structure):  # one classic BPF instruction
    _fields_ = [("code", _u16), ("jt", _u8), ("jf", _u8), ("k", _u32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _ioc(direction: int, nr: int, size: int) -> int:
    return direction << 30 | size << 16 | ord("!") << 8 | nr


_IOCTL_RECV = _ioc(3, 0, ctypes.sizeof(_Notif))  # _IOWR
_IOCTL_SEND = _ioc(3, 1, ctypes.sizeof(_Resp))  # _IOWR
_IOCTL_ID_VALID = _ioc(1, 2, 8)  # _IOW, __u64

Insn = tuple[int, int, int, int]
"""One classic BPF instruction: (code, jt, jf, k)."""


def program() -> list[Insn]:
    """The filter: x86_64 ``bind`` → user notification; other syscalls, arches and x32 → allow."""
    return [
        (LD_W_ABS, 0, 0, OFF_ARCH),
        (JEQ_K, 0, 4, _AUDIT_ARCH_X86_64),  # another arch (i386): allow
        (LD_W_ABS, 0, 0, OFF_NR),
        (JGE_K, 2, 0, _X32_SYSCALL_BIT),  # x32 numbers: allow
        (JEQ_K, 0, 1, _NR_BIND),
        (RET_K, 0, 0, RET_USER_NOTIF),
        (RET_K, 0, 0, RET_ALLOW),
    ]


@dataclasses.dataclass(frozen=True, slots=True)
class Wildcard:
    """A bind to a wildcard address: the socket family it needs and its port."""

    family: int
    port: int
    mapped: bool = False
    """``::ffff:0.0.0.0`` (the IPv4 side of a dual-stack socket)."""


def parse(raw: bytes) -> Wildcard | None:
    """The wildcard in a raw ``sockaddr`` as the kernel would read it; None for anything else
    (a specific address, AF_UNIX, too short for its family)."""
    if len(raw) < 2:
        return None
    (family,) = struct.unpack_from("=H", raw)
    # AF_UNSPEC with INADDR_ANY is the kernel's old spelling of 0.0.0.0 on an AF_INET socket.
    if family in (socket.AF_INET, socket.AF_UNSPEC) and len(raw) >= 16 and raw[4:8] == bytes(4):
        return Wildcard(socket.AF_INET, struct.unpack_from("!H", raw, 2)[0])
    if family == socket.AF_INET6 and len(raw) >= 24:  # SIN6_LEN_RFC2133: scope id optional
        port, addr = struct.unpack_from("!H", raw, 2)[0], raw[8:24]
        if addr == bytes(16):
            return Wildcard(socket.AF_INET6, port)
        if addr == bytes(10) + b"\xff\xff" + bytes(4):
            return Wildcard(socket.AF_INET6, port, mapped=True)
    return None


def target(wild: Wildcard, address: str, v6only: bool) -> tuple[tuple[str | int, ...], bool] | None:
    """Where to bind instead: (the address for ``socket.bind``, whether it needs
    ``IPV6_FREEBIND``); None when the kernel should see the original bind."""
    if wild.family == socket.AF_INET:
        return (address, wild.port), False
    if not v6only:
        return (f"::ffff:{address}", wild.port, 0, 0), False
    if wild.mapped:
        return None  # a V6ONLY socket refuses IPv4 addresses: the kernel's EINVAL
    unreachable = ipaddress.IPv6Address(_V6_UNREACHABLE | int(ipaddress.IPv4Address(address)))
    return (str(unreachable), wild.port, 0, 0), True


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _install_filter() -> int:
    """Install :func:`program` on this process; returns the listener fd."""
    insns = program()
    filters = (_SockFilter * len(insns))(*(_SockFilter(*i) for i in insns))
    prog = _SockFprog(len(insns), filters)
    libc = _libc()
    # No no_new_privs: root (CAP_SYS_ADMIN) may install a filter without it, and a container
    # may run setuid programs, which no_new_privs would break.
    for flags in (_FLAG_NEW_LISTENER | _FLAG_WAIT_KILLABLE_RECV, _FLAG_NEW_LISTENER):
        fd: int = libc.syscall(
            ctypes.c_long(_NR_SECCOMP),
            ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
            ctypes.c_long(flags),
            ctypes.byref(prog),
        )
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err != errno.EINVAL:  # EINVAL: a kernel before 5.19 without WAIT_KILLABLE_RECV
            break
    raise OSError(err, f"seccomp user notification for bind: {os.strerror(err)}")


def confine(address: str) -> None:
    """From now on, rewrite wildcard binds of this process and its descendants to ``address``
    (an IPv4 address) through a forked supervisor; needs CAP_SYS_ADMIN."""
    ipaddress.IPv4Address(address)
    ours, theirs = socket.socketpair()
    sys.stdout.flush()
    sys.stderr.flush()  # the fork must not write buffered output twice
    parent = os.getpid()
    if os.fork() == 0:  # the supervisor
        code = 0
        try:
            ours.close()
            _supervisor(theirs, address, parent)
        except BaseException as err:  # whatever happens, the forked child must reach _exit
            print(f"netbind supervisor: {err!r}", file=sys.stderr, flush=True)
            code = 1
        os._exit(code)
    theirs.close()
    with ours:
        listener = _install_filter()
        socket.send_fds(ours, [b"L"], [listener])
        os.close(listener)


def _supervisor(channel: socket.socket, address: str, parent: int) -> None:
    libc = _libc()
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        return  # the container ended before the parent-death signal was set
    libc.prctl(_PR_SET_NAME, b"cd-netbind", 0, 0, 0)
    # Keep only the log (stdout, stderr) and the channel: above all not the runtime's exec
    # pipe, whose end tells it that the container's command runs.
    keep = channel.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
    _, fds, _, _ = socket.recv_fds(channel, 1, 1)
    channel.close()
    if fds:  # none: the filter was never installed (the container failed before)
        _serve(fds[0], address)


def _serve(listener: int, address: str) -> None:
    """Answer bind notifications until the filter has no users left (POLLHUP)."""
    poller = select.poll()
    poller.register(listener, select.POLLIN)
    while True:
        events = poller.poll()
        if events[0][1] & select.POLLIN:
            _answer(listener, address)
        elif events[0][1] & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
            return


def _answer(listener: int, address: str) -> None:
    notif = _Notif()  # the kernel insists on a zeroed buffer
    try:
        fcntl.ioctl(listener, _IOCTL_RECV, notif)
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.EINTR):
            return  # the caller died or was interrupted before we got it
        raise
    try:
        result = _decide(listener, notif, address)
    except OSError as err:
        # Unexpected (the caller vanished mid-way and the like): the kernel's own bind decides.
        print(f"netbind: bind of pid {notif.pid}: {err}", file=sys.stderr, flush=True)
        result = None
    resp = _Resp(id=notif.id)
    if result is None:
        resp.flags = _NOTIF_FLAG_CONTINUE
    else:
        resp.error = -result
    try:
        fcntl.ioctl(listener, _IOCTL_SEND, resp)
    except OSError as err:
        if err.errno != errno.ENOENT:  # ENOENT: the caller is gone
            raise


def _decide(listener: int, notif: _Notif, address: str) -> int | None:
    """Bind a wildcard ourselves: its errno (0 on success); None to let the kernel bind."""
    tid, args = notif.pid, notif.data.args
    sockfd = ctypes.c_int32(args[0] & 0xFFFFFFFF).value
    length = ctypes.c_int32(args[2] & 0xFFFFFFFF).value
    if not 2 <= length <= _MAX_SOCKADDR or args[1] >= 1 << 63:
        return None  # the kernel answers EINVAL or EFAULT itself
    status = Path(f"/proc/{tid}/status").read_text()
    tgid = int(status.split("\nTgid:", 1)[1].split()[0])
    pidfd = os.pidfd_open(tgid)
    mem = os.open(f"/proc/{tid}/mem", os.O_RDONLY)
    try:
        # Opened before the check: a valid notification proves both are still the caller's.
        fcntl.ioctl(listener, _IOCTL_ID_VALID, ctypes.c_uint64(notif.id))
        try:
            raw = os.pread(mem, length, args[1])
        except OSError:
            return None  # unreadable: the kernel's EFAULT
        wild = parse(raw)
        if wild is None:
            return None
        fd = _libc().syscall(_NR_PIDFD_GETFD, pidfd, sockfd, 0)
        if fd < 0:
            return None  # not an open fd: the kernel's EBADF
    finally:
        os.close(mem)
        os.close(pidfd)
    return _bind(fd, wild, address)


def _bind(fd: int, wild: Wildcard, address: str) -> int | None:
    try:
        sock = socket.socket(fileno=fd)
    except OSError as err:
        os.close(fd)
        return err.errno or errno.ENOTSOCK
    with sock:
        if sock.family != wild.family:
            return None  # the kernel's EAFNOSUPPORT or EINVAL
        v6only = wild.family == socket.AF_INET6 and bool(
            sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
        )
        dest = target(wild, address, v6only)
        if dest is None:
            return None
        sockaddr, freebind = dest
        was = sock.getsockopt(socket.IPPROTO_IPV6, _IPV6_FREEBIND) if freebind else 0
        try:
            if freebind:
                sock.setsockopt(socket.IPPROTO_IPV6, _IPV6_FREEBIND, 1)
            sock.bind(sockaddr)
        except OSError as err:
            return err.errno or errno.EINVAL
        finally:
            if freebind and not was:
                sock.setsockopt(socket.IPPROTO_IPV6, _IPV6_FREEBIND, 0)
    return 0
