"""The CDI merge rules, case by case: what applying edits does to a container's config."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from compute_domains.infra import cdispec
from compute_domains.infra.cdispec import apply

Node = cdispec.DeviceNode
Mount = cdispec.Mount
Edits = cdispec.ContainerEdits


def _complete(path: str, major: int, minor: int) -> Node:
    """A fully given char device node (its host node need not exist)."""
    return Node(path=path, type="c", major=major, minor=minor)


@pytest.mark.parametrize(
    ("base", "edits", "want"),
    [
        ((), ("A=1",), ("A=1",)),
        (("A=0", "B=0"), ("A=1",), ("A=1", "B=0")),
        (("B=0",), ("A=1", "A=2"), ("B=0", "A=2")),
        (("A=0", "B=0"), ("C=1", "A=2", "C=3"), ("A=2", "B=0", "C=3")),
        (("A=x=y",), ("A=1=2",), ("A=1=2",)),
    ],
    ids=[
        "appended",
        "replaces-the-containers-own-in-place",
        "later-edit-of-a-name-wins",
        "replace-and-append-mixed",
        "only-the-first-equals-splits",
    ],
)
def test_env_entries_replace_by_name_else_append(
    base: tuple[str, ...], edits: tuple[str, ...], want: tuple[str, ...]
) -> None:
    out = cdispec.apply_edits(Edits(env=edits), cdispec.OciConfig(env=base))
    assert out.env == want


@pytest.mark.parametrize(
    ("base", "edits", "want"),
    [
        ((), (_complete("/dev/a", 1, 1),), [("/dev/a", 1)]),
        (
            (_complete("/dev/a", 1, 1), _complete("/dev/b", 1, 2)),
            (_complete("/dev/a", 9, 9),),
            [("/dev/b", 2), ("/dev/a", 9)],
        ),
        ((), (_complete("/dev/a", 1, 1), _complete("/dev/a", 1, 5)), [("/dev/a", 5)]),
    ],
    ids=["added", "same-path-removed-then-appended", "later-edit-of-a-path-wins"],
)
def test_device_nodes_replace_the_node_at_the_same_container_path(
    base: tuple[Node, ...], edits: tuple[Node, ...], want: list[tuple[str, int]]
) -> None:
    out = cdispec.apply_edits(Edits(device_nodes=edits), cdispec.OciConfig(device_nodes=base))
    assert [(n.path, n.minor) for n in out.device_nodes] == want


@pytest.mark.parametrize(
    ("base", "edits", "want"),
    [
        (
            (Mount(host_path="/vol", container_path="/data"),),
            (Mount(host_path="/cdi", container_path="/data", options=("ro",)),),
            [("/cdi", "/data", ("ro",))],
        ),
        (
            (),
            (
                Mount(host_path="/1", container_path="/x"),
                Mount(host_path="/2", container_path="/x"),
            ),
            [("/2", "/x", ())],
        ),
        (
            (
                Mount(host_path="/deep", container_path="/a/b/c"),
                Mount(host_path="/mid", container_path="/a/b"),
            ),
            (Mount(host_path="/top", container_path="/a/"),),
            [("/top", "/a/", ()), ("/mid", "/a/b", ()), ("/deep", "/a/b/c", ())],
        ),
        (
            (
                Mount(host_path="/p", container_path="/p/q"),
                Mount(host_path="/r", container_path="/r/s"),
            ),
            (Mount(host_path="/t", container_path="/t/u"),),
            [("/p", "/p/q", ()), ("/r", "/r/s", ()), ("/t", "/t/u", ())],
        ),
    ],
    ids=[
        "cdi-mount-replaces-a-pod-volume-at-the-same-path",
        "later-edit-of-a-path-wins",
        "all-mounts-sorted-parents-first",
        "equal-depth-keeps-its-order",
    ],
)
def test_mounts_replace_by_container_path_then_sort_by_depth(
    base: tuple[Mount, ...],
    edits: tuple[Mount, ...],
    want: list[tuple[str, str, tuple[str, ...]]],
) -> None:
    out = cdispec.apply_edits(Edits(mounts=edits), cdispec.OciConfig(mounts=base))
    assert [(m.host_path, m.container_path, m.options) for m in out.mounts] == want


def test_mounts_stay_in_their_order_when_the_edits_add_none() -> None:
    """The library sorts only after adding mounts; edits without mounts leave the order alone."""
    base = (
        Mount(host_path="/d", container_path="/a/b"),
        Mount(host_path="/t", container_path="/a"),
    )
    out = cdispec.apply_edits(Edits(env=("A=1",)), cdispec.OciConfig(mounts=base))
    assert out.mounts == base


def test_mount_host_paths_go_through_the_host_and_base_mounts_do_not(tmp_path: Path) -> None:
    base = (Mount(host_path="/already/here", container_path="/v"),)
    edits = Edits(mounts=(Mount(host_path="/usr/lib/x.so", container_path="/usr/lib/x.so"),))
    host = cdispec.RootedHost(root=tmp_path)
    out = cdispec.apply_edits(edits, cdispec.OciConfig(mounts=base), host=host)
    assert [m.host_path for m in out.mounts] == ["/already/here", str(tmp_path / "usr/lib/x.so")]


def test_hooks_are_appended_and_gids_skip_zero_and_repeats() -> None:
    first = cdispec.Hook(hook_name="createContainer", path="/bin/a")
    second = cdispec.Hook(hook_name="createContainer", path="/bin/b")
    base = cdispec.OciConfig(hooks=(first,), additional_gids=(5,))
    out = cdispec.apply_edits(Edits(hooks=(second,), additional_gids=(0, 5, 7, 7)), base)
    assert out.hooks == (first, second)
    assert out.additional_gids == (5, 7)


@pytest.mark.parametrize(
    ("user", "node", "want"),
    [
        ((0, 0), Node(path="/dev/a", type="c", major=1, minor=1), (None, None)),
        ((1000, 100), Node(path="/dev/a", type="c", major=1, minor=1), (1000, 100)),
        ((1000, 100), Node(path="/dev/a", type="c", major=1, minor=1, uid=0, gid=3), (0, 3)),
    ],
    ids=["root-user-leaves-them-unset", "non-root-user-fills-them", "given-ones-are-kept"],
)
def test_device_owner_defaults_to_a_non_root_container_user(
    user: tuple[int, int], node: Node, want: tuple[int | None, int | None]
) -> None:
    base = cdispec.OciConfig(uid=user[0], gid=user[1])
    (out,) = cdispec.apply_edits(Edits(device_nodes=(node,)), base).device_nodes
    assert (out.uid, out.gid) == want


@pytest.fixture
def host(tmp_path: Path) -> cdispec.RootedHost:
    """A host folder with a FIFO (mode 0640), a plain file and nothing else."""
    (tmp_path / "dev").mkdir()
    os.mkfifo(tmp_path / "dev/fifo")
    (tmp_path / "dev/fifo").chmod(0o640)
    (tmp_path / "dev/plain").write_text("no device")
    return cdispec.RootedHost(root=tmp_path)


_NULL = os.stat("/dev/null")
_NULL_NUMBERS = (os.major(_NULL.st_rdev), os.minor(_NULL.st_rdev))


@pytest.mark.parametrize(
    ("node", "want"),
    [
        (Node(path="/dev/fifo"), ("/dev/fifo", "p", 0, 0, 0o640, None)),
        (Node(path="/dev/p", host_path="/dev/fifo"), ("/dev/fifo", "p", 0, 0, 0o640, None)),
        (
            Node(path="/dev/p", host_path="/dev/fifo", file_mode=0o600),
            ("/dev/fifo", "p", 0, 0, 0o600, None),
        ),
        (
            Node(path="/dev/c", type="c", major=238, minor=4),
            ("/dev/c", "c", 238, 4, None, "rwm"),
        ),
        (
            Node(path="/dev/c", type="c", major=238, minor=4, permissions="rw"),
            ("/dev/c", "c", 238, 4, None, "rw"),
        ),
        (Node(path="/dev/fifo", type="p"), ("/dev/fifo", "p", 0, 0, 0o640, None)),
    ],
    ids=[
        "path-only-takes-type-numbers-and-mode",
        "host-path-is-where-it-looks",
        "a-given-mode-is-kept",
        "a-complete-node-needs-no-host-node",
        "given-permissions-are-kept",
        "a-typed-fifo-takes-the-host-mode",
    ],
)
def test_device_nodes_are_completed_from_their_host_node(
    host: cdispec.RootedHost, node: Node, want: tuple[object, ...]
) -> None:
    done = cdispec.complete_node(node, host)
    assert (
        done.host_path,
        done.type,
        done.major,
        done.minor,
        done.file_mode,
        done.permissions,
    ) == want


def test_a_char_node_given_by_path_takes_the_host_numbers() -> None:
    done = cdispec.complete_node(Node(path="/dev/nv", host_path="/dev/null"), cdispec.RootedHost())
    assert (done.type, done.major, done.minor) == ("c", *_NULL_NUMBERS)
    assert done.file_mode == stat.S_IMODE(_NULL.st_mode)


def test_a_given_major_is_kept_even_when_the_type_comes_from_the_host() -> None:
    node = Node(path="/dev/nv", host_path="/dev/null", major=7, minor=8)
    done = cdispec.complete_node(node, cdispec.RootedHost())
    assert (done.type, done.major, done.minor) == ("c", 7, 8)


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (
            Node(path="/dev/nvidia0"),
            'failed to stat CDI host device "/dev/nvidia0": no such file or directory',
        ),
        (Node(path="/dev/plain"), 'failed to stat CDI host device "/dev/plain": not a device node'),
        (
            Node(path="/dev/x", host_path="/dev/fifo", type="c"),
            'CDI device ("/dev/x", "/dev/fifo"), host type mismatch (c, p)',
        ),
        (
            Node(path="/dev/x", host_path="/dev/fifo", type="u"),
            'CDI device ("/dev/x", "/dev/fifo"), host type mismatch (u, p)',
        ),
    ],
    ids=["missing", "not-a-device", "type-mismatch", "unbuffered-is-not-the-host-type"],
)
def test_an_incomplete_node_without_a_usable_host_node_fails(
    host: cdispec.RootedHost, node: Node, message: str
) -> None:
    with pytest.raises(cdispec.InjectionError) as caught:
        cdispec.apply_edits(Edits(env=("A=1",), device_nodes=(node,)), host=host)
    assert str(caught.value) == f"failed to inject devices: {message}"


def test_the_rooted_host_maps_paths_under_its_root(tmp_path: Path) -> None:
    host = apply.RootedHost(root=tmp_path)
    assert host.device_path("/dev/x") == tmp_path / "dev/x"
    assert host.mount_source("/lib/y") == str(tmp_path / "lib/y")
