"""The workload stand-in as a task of a virtual node (sim/workload_inproc.py): what it lists,
what it asks, what it prints, and which containers run it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from compute_domains.containers import runtime, virtual
from compute_domains.infra import logroute
from compute_domains.sim import imex_wire, standins, workload, workload_inproc
from compute_domains.sim.imex_wire import Link


def _view(
    tmp_path: Path, devices: tuple[runtime.DeviceNode, ...], log: logroute.Sink | None = None
) -> virtual.View:
    imexd = tmp_path / "domain"
    imexd.mkdir()
    (tmp_path / "tmp").mkdir()
    return virtual.View(
        argv=("mnnvl-workload", "--watch", "3600"),
        env={},
        mounts=(
            runtime.Mount(source=str(imexd), target="/imexd"),
            runtime.Mount(source=str(tmp_path / "tmp"), target="/tmp"),
        ),
        devices=devices,
        hostname="job-7",
        log=log,
    )


def test_lists_only_the_channel_char_devices_it_was_given_by_number(tmp_path: Path) -> None:
    dev = "/dev/nvidia-caps-imex-channels"
    view = _view(
        tmp_path,
        (
            runtime.DeviceNode(path=f"{dev}/channel2", major=510, minor=2),
            runtime.DeviceNode(path=f"{dev}/channel0", major=510, minor=0),
            runtime.DeviceNode(path=f"{dev}/channelx", major=510, minor=9),
            runtime.DeviceNode(path=f"{dev}/channel5", major=510, minor=5, type="b"),
            runtime.DeviceNode(path="/dev/nvidia0", major=195, minor=0),
        ),
    )
    found = workload_inproc.channels_of(view, dev)
    assert found == [
        workload.Channel(f"{dev}/channel0", 510, 0),
        workload.Channel(f"{dev}/channel2", 510, 2),
    ]


async def _run_until(
    tmp_path: Path,
    view: virtual.View,
    port: int,
    marker: str,
    server: asyncio.Server,
    sink: logroute.Sink,
) -> str:
    """Run the program against the command service on ``port`` (two configured nodes) until
    its log says ``marker``; its log's text. The daemon config names its nodes file as the
    container sees it (/imexd/...)."""
    (tmp_path / "domain" / "nodes.cfg").write_text("10.0.0.1\n10.0.0.2\n")
    (tmp_path / "domain" / "imexd.cfg").write_text(
        f"IMEX_CMD_ENABLED=1\nIMEX_CMD_BIND_INTERFACE_IP=127.0.0.1\nIMEX_CMD_PORT={port}\n"
        "IMEX_NODE_CONFIG_FILE=/imexd/nodes.cfg\n"
    )
    log = tmp_path / "log"
    task = asyncio.create_task(workload_inproc.run(view))
    try:
        async with asyncio.timeout(30):
            while marker not in (log.read_text() if log.exists() else ""):
                await asyncio.sleep(0.05)  # the log is a file: nothing to wait on but its text
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        server.close()
        sink.close()
    return log.read_text()


async def test_reports_channels_and_an_up_domain_through_the_containers_config(
    tmp_path: Path,
) -> None:
    # A real command service on loopback, answering -N as the IMEX stand-in's does.
    nodes = [
        {
            "node": i,
            "host": f"compute-domain-daemon-{i:04d}",
            "state": "READY",
            "version": "NO_GPU",
            "connections": {"0": Link.CONNECTED.value, "1": Link.CONNECTED.value},
        }
        for i in range(2)
    ]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await imex_wire.recv(reader)
        await imex_wire.send(writer, {"t": "report", "local": 1, "nodes": nodes})
        await imex_wire.close(writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    dev = runtime.DeviceNode(path="/dev/nvidia-caps-imex-channels/channel0", major=510, minor=0)
    sink = logroute.Sink(tmp_path / "log")
    view = _view(tmp_path, (dev,), sink)
    text = await _run_until(tmp_path, view, port, "OK:", server, sink)
    assert "host job-7 starting" in text
    assert "IMEX channels: 1: /dev/nvidia-caps-imex-channels/channel0 (char 510:0)" in text
    assert "asking the local daemon via config /imexd/imexd.cfg" in text
    assert "IMEX domain: UP, 2/2 configured nodes READY, this node is #1" in text
    assert "rank: 1 (from local IMEX node ID" in text
    assert "OK: channels=1 domain=UP" in text
    # No /sys/class/net of its own (no DRANET): no RDMA NIC, whatever the machine has.
    assert (
        "transport: MNNVL to the 2 READY nodes of this IMEX domain; peers outside it fall back "
        "to sockets (no RDMA NIC in this container) (WORLD_SIZE unknown)"
    ) in text
    assert text.rstrip().endswith("mnnvl-workload: stopping")


def test_runs_in_process_only_the_wrapper_this_installation_wrote(tmp_path: Path) -> None:
    ours = standins.install(tmp_path / "ours")
    assert standins.runs_here(ours / "mnnvl-workload", "mnnvl-workload")
    other = standins.install(tmp_path / "other", python="/opt/older/bin/python3")
    assert not standins.runs_here(other / "mnnvl-workload", "mnnvl-workload")
    assert not standins.runs_here(tmp_path / "missing", "mnnvl-workload")
    assert not standins.runs_here(ours / "mnnvl-workload", "nvidia-imex")
    assert sys.executable in (ours / "mnnvl-workload").read_text()


def test_rdma_nics_are_those_in_the_pods_own_net_view(tmp_path: Path) -> None:
    bare = _view(tmp_path, ())
    assert workload_inproc.nics_of(bare) == []
    net = tmp_path / "podnet"
    (net / "gpu2rdma0" / "device" / "infiniband" / "mlx5_2").mkdir(parents=True)
    (net / "eth0").mkdir()
    given = virtual.View(
        argv=bare.argv,
        env={},
        mounts=(*bare.mounts, runtime.Mount(source=str(net), target="/sys/class/net")),
    )
    assert workload_inproc.nics_of(given) == ["gpu2rdma0"]


async def test_with_mnnvl_off_it_does_not_wait_for_the_domain_to_come_up(tmp_path: Path) -> None:
    # A domain that never comes UP (its peer is unavailable): with NCCL_MNNVL_ENABLE=0 the
    # program reports at once instead of waiting its 120 s for UP.
    nodes = [
        {
            "node": i,
            "host": f"compute-domain-daemon-{i:04d}",
            "state": "READY" if i == 0 else "UNAVAILABLE",
            "version": "NO_GPU",
            "connections": {},
        }
        for i in range(2)
    ]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await imex_wire.recv(reader)
        await imex_wire.send(writer, {"t": "report", "local": 0, "nodes": nodes})
        await imex_wire.close(writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sink = logroute.Sink(tmp_path / "log")
    bare = _view(tmp_path, (), sink)
    view = virtual.View(
        argv=bare.argv, env={"NCCL_MNNVL_ENABLE": "0"}, mounts=bare.mounts, log=sink
    )
    text = await _run_until(tmp_path, view, port, "NOT READY:", server, sink)
    assert "IMEX domain: DEGRADED, 1/2 configured nodes READY" in text
    assert "transport: NCCL_MNNVL_ENABLE=0: no MNNVL; every peer falls back to sockets" in text
