from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from compute_domains._proto.dra.v1 import api_pb2 as v1
from compute_domains._proto.dra.v1 import api_pb2_grpc as v1_grpc
from compute_domains._proto.dra.v1beta1 import api_pb2 as v1beta1
from compute_domains._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from compute_domains._proto.pluginregistration.v1 import api_pb2 as reg
from compute_domains._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from compute_domains.plugin import checkpoint, driver, grpc_server, health, registration


class ScriptedDriver:
    """Answers claim ``bad`` with an error and every other claim with one device."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    async def prepare(self, refs: Sequence[driver.ClaimRef]) -> dict[str, driver.Result]:
        self.seen.append([r.uid for r in refs])
        out = {}
        for r in refs:
            if r.uid == "bad":
                out[r.uid] = driver.Result(error='permanent error: unknown field "x"')
            else:
                dev = checkpoint.PreparedDevice(
                    pool_name="node-a",
                    device_name="channel-0",
                    request_names=("channel",),
                    cdi_device_ids=(f"v/c={r.uid}",),
                )
                out[r.uid] = driver.Result(devices=(dev,))
        return out

    async def unprepare(self, refs: Sequence[driver.ClaimRef]) -> dict[str, str]:
        return {r.uid: "" if r.uid != "bad" else "boom" for r in refs}


@pytest.fixture
async def sockets(tmp_path: Path) -> AsyncIterator[tuple[Path, Path]]:
    dra_path, reg_path = tmp_path / "dra.sock", tmp_path / "reg" / "x-reg.sock"
    dra = grpc_server.dra_server(cast(driver.Driver, ScriptedDriver()))
    reg_server = registration.registration_server(
        registration.RegistrationServicer(Path("/var/lib/kubelet/plugins/x/dra.sock"), "node-a")
    )
    dra_inode = await grpc_server.listen_unix(dra, dra_path)
    reg_inode = await grpc_server.listen_unix(reg_server, reg_path)
    yield dra_path, reg_path
    await grpc_server.stop_unix(reg_server, reg_path, reg_inode)
    await grpc_server.stop_unix(dra, dra_path, dra_inode)
    assert not dra_path.exists() and not reg_path.exists()


@pytest.mark.parametrize("api", ["v1", "v1beta1"])
async def test_both_versions_answer_every_claim(sockets: tuple[Path, Path], api: str) -> None:
    pb: Any = v1 if api == "v1" else v1beta1
    stub_cls: Any = v1_grpc.DRAPluginStub if api == "v1" else v1beta1_grpc.DRAPluginStub
    async with grpc.aio.insecure_channel(f"unix:{sockets[0]}") as ch:
        stub = stub_cls(ch)
        request = pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace="ns", name="a", uid="good"), pb.Claim(uid="bad")]
        )
        reply = await stub.NodePrepareResources(request, timeout=5)
        assert reply.claims["good"].devices[0].cdi_device_ids == ["v/c=good"]
        assert reply.claims["good"].devices[0].request_names == ["channel"]
        assert 'unknown field "x"' in reply.claims["bad"].error
        undo = await stub.NodeUnprepareResources(
            pb.NodeUnprepareResourcesRequest(claims=[pb.Claim(uid="good"), pb.Claim(uid="bad")]),
            timeout=5,
        )
        assert undo.claims["good"].error == "" and undo.claims["bad"].error == "boom"
        assert set(undo.claims) == {"good", "bad"}


async def test_registration_names_v1_first_and_the_host_endpoint(
    sockets: tuple[Path, Path],
) -> None:
    async with grpc.aio.insecure_channel(f"unix:{sockets[1]}") as ch:
        stub = cast("reg_grpc.RegistrationAsyncStub", reg_grpc.RegistrationStub(ch))
        info = await stub.GetInfo(reg.InfoRequest(), timeout=5)
        await stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True))
    assert info.type == "DRAPlugin"
    assert info.name == "compute-domain.nvidia.com"
    assert info.endpoint == "/var/lib/kubelet/plugins/x/dra.sock"
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]


async def test_health_probe_and_service(sockets: tuple[Path, Path]) -> None:
    dra_path, reg_path = sockets
    assert await health.probe(reg_path, dra_path)
    server = health.health_server(lambda: health.probe(reg_path, dra_path))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        req_cls, resp_cls = health.health_messages()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            check = ch.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=req_cls.SerializeToString,
                response_deserializer=resp_cls.FromString,
            )
            ok = await check(req_cls(service="liveness"), timeout=5)
            assert ok.status == health.SERVING  # type: ignore[attr-defined]
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await check(req_cls(service="other"), timeout=5)
            assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    finally:
        await server.stop(None)


async def test_the_self_check_keeps_its_channels_until_a_socket_is_gone(
    sockets: tuple[Path, Path],
) -> None:
    dra_path, reg_path = sockets
    check = health.SelfCheck(reg_path, dra_path, timeout=2)
    try:
        assert await check()
        kept = check._channels
        assert kept is not None
        assert await check()
        assert check._channels is kept
        # The kubelet connects anew: a socket file removed under a kept connection fails.
        moved = dra_path.with_name("moved.sock")
        dra_path.rename(moved)
        assert not await check()
        assert check._channels is None
        moved.rename(dra_path)
        assert await check()
        assert check._channels is not None and check._channels is not kept
    finally:
        await check.close()


async def test_probe_fails_without_sockets(tmp_path: Path) -> None:
    assert not await health.probe(tmp_path / "a.sock", tmp_path / "b.sock", timeout=0.5)


async def test_a_replaced_socket_is_not_removed_on_stop(tmp_path: Path) -> None:
    path = tmp_path / "dra.sock"
    path.write_text("stale")
    server = grpc_server.dra_server(cast(driver.Driver, ScriptedDriver()))
    inode = await grpc_server.listen_unix(server, path)
    assert path.is_socket()
    path.unlink()
    path.write_text("a newer plugin's socket")
    await grpc_server.stop_unix(server, path, inode)
    assert path.read_text() == "a newer plugin's socket"
