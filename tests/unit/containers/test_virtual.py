"""``containers.virtual``: container paths on the node, and in-process containers' lives."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from compute_domains.containers import runtime, virtual

MOUNTS = (
    runtime.Mount(source="/n/var/lib/kubelet/plugins", target="/var/lib/kubelet/plugins"),
    runtime.Mount(source="/n/pods/p/hosts", target="/etc/hosts"),
    runtime.Mount(source="/n/domains/cd", target="/imexd", readonly=True),
    runtime.Mount(source="/n/proc/devices", target="/host/proc/devices"),
    runtime.Mount(source="/n/pods/p/sa", target="/var/run/secrets/kubernetes.io/serviceaccount"),
    runtime.Mount(source="/n/var", target="/var"),
)


@pytest.mark.parametrize(
    ("inside", "on_node"),
    [
        pytest.param("/imexd/imexd.cfg", "/n/domains/cd/imexd.cfg", id="under-a-mount"),
        pytest.param("/imexd", "/n/domains/cd", id="the-mount-itself"),
        pytest.param("/etc/hosts", "/n/pods/p/hosts", id="a-file-mount"),
        pytest.param("/host/proc/devices", "/n/proc/devices", id="a-host-file"),
        pytest.param(
            "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "/n/pods/p/sa/token",
            id="longest-target-wins",
        ),
        pytest.param("/var/log/x", "/n/var/log/x", id="shorter-target"),
        pytest.param("/imexdx/a", "/imexdx/a", id="a-prefix-is-no-parent"),
        pytest.param("/usr/bin/env", "/usr/bin/env", id="unmounted-is-the-hosts"),
    ],
)
def test_container_paths_translate_through_the_mounts(inside: str, on_node: str) -> None:
    view = virtual.View(argv=("x",), env={}, mounts=MOUNTS)
    assert view.host_path(inside) == Path(on_node)
    assert view.mounted(inside) == (inside != on_node)


def _runtime(tmp_path: Path, programs: virtual.Programs | None = None) -> virtual.VirtualRuntime:
    settings = runtime.RuntimeSettings(isolate=False, node_proc=tmp_path / "proc")
    return virtual.VirtualRuntime(settings, tmp_path / "containers", programs)


def _config(*argv: str) -> runtime.ContainerConfig:
    return runtime.ContainerConfig(argv=argv, env={"A": "1"})


async def test_pause_runs_in_process_until_stopped_and_exits_0(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    running = await rt.start("pod_pause", _config("sleep", "infinity"), tmp_path / "pause.log")
    assert isinstance(running.child, virtual.TaskChild)
    assert running.child.proc.returncode is None
    assert await running.child.stop(1.0) == 0
    assert running.child.proc.returncode == 0


async def test_a_known_program_logs_to_its_container_log_and_exits_with_its_status(
    tmp_path: Path,
) -> None:
    seen: list[virtual.View] = []

    async def program(view: virtual.View) -> int:
        seen.append(view)
        logging.getLogger("some.component").warning("hello from %s", view.argv[0])
        return 3

    rt = _runtime(tmp_path, lambda view: program if view.argv[0] == "known" else None)
    log = tmp_path / "known.log"
    running = await rt.start("pod_known", _config("known", "arg"), log)
    assert await running.child.proc.wait() == 3
    assert "hello from known" in log.read_text()
    view = seen[0]
    assert view.env == {"A": "1"} and view.argv == ("known", "arg")
    assert view.host_path("/proc/devices") == tmp_path / "proc/devices"
    assert view.host_path("/tmp/x") == tmp_path / "containers/pod_known/tmp/x"
    rc, out = await rt.exec(running, ["true"], 1.0)
    assert rc == 126 and "in-process" in out
    with pytest.raises(OSError):
        await rt.spawn(running, ["sh"], stdin=False, merge_stderr=True)


async def test_a_failing_program_exits_1_with_its_traceback_in_its_log(tmp_path: Path) -> None:
    async def program(view: virtual.View) -> int:
        raise RuntimeError("boom")

    rt = _runtime(tmp_path, lambda view: program)
    running = await rt.start("pod_f", _config("p"), tmp_path / "f.log")
    assert await running.child.proc.wait() == 1
    assert "RuntimeError: boom" in running.child.log_tail(5)


async def test_a_program_that_ignores_its_stop_is_killed_after_the_grace(tmp_path: Path) -> None:
    stopped = asyncio.Event()

    async def stubborn(view: virtual.View) -> int:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.set()
            await asyncio.Event().wait()  # a stuck graceful stop
        return 0

    rt = _runtime(tmp_path, lambda view: stubborn)
    running = await rt.start("pod_s", _config("p"), tmp_path / "s.log")
    await asyncio.sleep(0)
    assert await running.child.stop(0.1) == 137
    assert stopped.is_set()


async def test_other_containers_are_processes(tmp_path: Path) -> None:
    rt = _runtime(tmp_path, lambda view: None)
    running = await rt.start("pod_p", _config("sh", "-c", "echo hi"), tmp_path / "p.log")
    assert not isinstance(running.child, virtual.TaskChild)
    assert await running.child.proc.wait() == 0
    assert "hi" in (tmp_path / "p.log").read_text()
