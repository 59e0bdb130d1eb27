"""The first process of a simulated container: builds its private filesystem view, then execs.

Run as ``python -m compute_domains.containers.container_init run SPEC`` by ``runtime``. As root
it unshares a mount namespace, assembles a root from the host's system folders (``/usr``, ``/etc``
and ``/opt`` as overlays: a mapped image's files on top, a private writable layer like a real
container's, so CDI mounts can add files there; the rest as read-only binds), the node's
``/proc/devices`` and ``/proc/driver`` over the host's, a private ``/dev`` (tmpfs with the usual
nodes plus the CDI device nodes), the pod's own ``/etc/hosts`` and every volume mount, then
chroots there and execs the container command, so
the command keeps this process's pid. Nothing of it is visible outside the namespace: the
machine's own ``/dev``, ``/etc/hosts`` and ``/var`` are never touched. With an ``address`` in
SPEC, the command's wildcard binds land on that address (``netbind``).
``run SPEC EXEC_FD`` tells the runtime that the command was exec'd by closing EXEC_FD (it is
close-on-exec), so a container counts as running only once its command runs, as with runc's
exec FIFO. ``enter SPEC PID -- CMD...`` runs CMD inside a running container's view (exec
probes, ``kubectl exec``).
Without root there is no namespace: the command runs on the host view and the runtime says so.
"""

from __future__ import annotations

import ctypes
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from compute_domains.containers import netbind

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_MS_RDONLY, _MS_NOSUID, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 32, 4096, 16384, 1 << 18
_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
_IMAGE_DIRS = ("/usr", "/etc", "/opt")
"""Host folders a container gets as overlays (image files on top, a writable layer)."""
_NOT_IMAGE = ("proc", "sys", "dev", "tmp")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(
    src: str | None,
    dst: str,
    fstype: str | None,
    flags: int,
    data: str | None = None,
) -> None:
    libc = _libc()
    rc = libc.mount(
        src.encode() if src else None,
        dst.encode(),
        fstype.encode() if fstype else None,
        flags,
        data.encode() if data else None,
    )
    _check(rc, f"mount {src} on {dst}")


def _bind(src: str, dst: Path, readonly: bool) -> None:
    if Path(src).is_dir():
        dst.mkdir(parents=True, exist_ok=True)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists():
            dst.touch()
    _mount(src, str(dst), None, _MS_BIND | _MS_REC)
    if readonly:
        _mount(None, str(dst), None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_REC)


def _overlay(lowers: list[str], dst: Path, layers: Path) -> None:
    """Mount ``lowers`` (first on top) at ``dst`` with a private writable layer."""
    key = layers / dst.name
    upper, work = key / "upper", key / "work"
    for d in (upper, work, dst):
        d.mkdir(parents=True, exist_ok=True)
    data = f"lowerdir={':'.join(lowers)},upperdir={upper},workdir={work}"
    _mount("overlay", str(dst), "overlay", 0, data)


def _system(spec: dict[str, Any], root: Path) -> None:
    image = spec.get("image") or ""
    layers = Path(spec["layers"]) if spec.get("layers") else None
    shown: set[str] = set()
    for host in spec["system"]:
        target = _inside(root, host)
        if os.path.islink(host):
            if not target.is_symlink():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(os.readlink(host))
            continue
        if layers is not None and host in _IMAGE_DIRS:
            own = os.path.join(image, host.lstrip("/")) if image else ""
            _overlay([own, host] if own and os.path.isdir(own) else [host], target, layers)
            # An overlay shows only the lower folder's own filesystem, not what is mounted
            # below it: a GPU host's driver libraries often live on a mount of their own
            # (e.g. /usr/local/nvidia), which the container must see as a bind would show it.
            for sub in submounts(host, _mount_points()):
                if os.path.isdir(sub):
                    _bind(sub, _inside(root, sub), readonly=True)
        else:
            _bind(host, target, readonly=True)
        shown.add(host.lstrip("/").split("/", 1)[0])
    if image and layers is not None:
        # The image's own top-level folders (e.g. /templates) that the host does not have.
        for entry in sorted(Path(image).iterdir()):
            if entry.is_dir() and entry.name not in shown and entry.name not in _NOT_IMAGE:
                _overlay([str(entry)], root / entry.name, layers)


def _mount_points() -> list[str]:
    """Mount points of this mount namespace, from ``/proc/self/mountinfo`` (field 5)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as info:
            lines = info.read().splitlines()
    except OSError:
        return []
    return [line.split()[4].replace("\\040", " ") for line in lines if len(line.split()) > 4]


def submounts(top: str, points: list[str]) -> list[str]:
    """The outermost mount points strictly below ``top``, in order (nested ones come with
    their parent's recursive bind)."""
    below = sorted({p for p in points if p.startswith(top.rstrip("/") + "/")})
    outer: list[str] = []
    for point in below:
        if not any(point.startswith(o + "/") for o in outer):
            outer.append(point)
    return outer


def _inside(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def _build_root(spec: dict[str, Any]) -> Path:
    root = Path(spec["rootfs"])
    root.mkdir(parents=True, exist_ok=True)
    _check(_libc().unshare(_CLONE_NEWNS | _CLONE_NEWUTS), "unshare mount and UTS namespaces")
    if spec.get("hostname"):
        name = spec["hostname"].encode()
        _check(_libc().sethostname(name, len(name)), "sethostname")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    # The private /tmp goes first, so host folders that live under /tmp stay visible on top.
    early = [m for m in spec["mounts"] if m["target"] == "/tmp"]
    for mount in early:
        _bind(mount["source"], _inside(root, mount["target"]), mount.get("readonly", False))
    _system(spec, root)
    for sub in ("proc", "sys"):
        _bind(f"/{sub}", root / sub, readonly=sub == "sys")
    for source, target in spec.get("proc", []):
        # The node's kernel tables (device majors, driver files), not this machine's.
        if os.path.exists(target):
            _bind(source, _inside(root, target), readonly=True)
    dev = root / "dev"
    dev.mkdir(exist_ok=True)
    _mount("tmpfs", str(dev), "tmpfs", _MS_NOSUID, "mode=755")
    for name in _DEV_NODES:
        if os.path.exists(f"/dev/{name}"):
            _bind(f"/dev/{name}", dev / name, readonly=False)
    (dev / "shm").mkdir()
    _mount("tmpfs", str(dev / "shm"), "tmpfs", _MS_NOSUID, "mode=1777")
    for node in spec["devices"]:
        path = _inside(root, node["path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        kind = {"b": stat.S_IFBLK, "p": stat.S_IFIFO}.get(node.get("type", "c"), stat.S_IFCHR)
        os.mknod(path, kind | node.get("mode", 0o666), os.makedev(node["major"], node["minor"]))
        os.chmod(path, node.get("mode", 0o666))
    for mount in spec["mounts"]:
        if mount["target"] != "/tmp":
            _bind(mount["source"], _inside(root, mount["target"]), mount.get("readonly", False))
    return root


def _enter(spec: dict[str, Any], pid: int) -> None:
    for ns, flag in (("mnt", _CLONE_NEWNS), ("uts", _CLONE_NEWUTS)):
        fd = os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY)
        try:
            _check(_libc().setns(fd, flag), f"setns {ns} into container pid {pid}")
        finally:
            os.close(fd)
    os.chroot(spec["rootfs"])


def _exec(spec: dict[str, Any], argv: list[str], exec_fd: int | None = None) -> None:
    env: dict[str, str] = spec["env"]
    os.chdir(spec.get("workdir") or "/")
    if exec_fd is not None:
        # The runtime waits for this pipe to close: at the exec (close-on-exec), or when this
        # process exits because the exec failed. Only then is the container running.
        os.set_inheritable(exec_fd, False)
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        print(f'exec: "{argv[0]}": executable file not found in $PATH', file=sys.stderr)
        sys.exit(127)
    except PermissionError:
        print(f'exec: "{argv[0]}": permission denied', file=sys.stderr)
        sys.exit(126)


def main(argv: list[str]) -> None:
    """``run SPEC [EXEC_FD]`` or ``enter SPEC PID -- CMD...``."""
    # Die with the node agent that started us (it forks without a pre-exec hook).
    _libc().prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL; survives the exec below
    mode, spec_path = argv[0], argv[1]
    spec: dict[str, Any] = json.loads(Path(spec_path).read_text())
    if mode == "run":
        # Its own session and process group: the runtime ends the container's every process
        # (what ``sh -c`` forks too), as a PID namespace would, not just the first one.
        os.setsid()
        if spec["isolate"]:
            root = _build_root(spec)
            if spec.get("address"):
                # Wildcard binds land on the container's address, as in a network namespace
                # of its own: NVIDIA's plugin listens on :51515 on every node.
                netbind.confine(spec["address"])
            os.chroot(root)
        _exec(spec, spec["command"], int(argv[2]) if len(argv) > 2 else None)
    elif mode == "enter":
        pid, cmd = int(argv[2]), argv[argv.index("--") + 1 :]
        if spec["isolate"]:
            _enter(spec, pid)
        _exec(spec, cmd)
    else:
        raise SystemExit(f"container_init: unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
