"""A minimal DRA driver for testing the simulated kubelet before the project's plugin exists.

It registers on one simulated node (registration socket in the node's ``plugins_registry``),
publishes a ResourceSlice with a few devices, and prepares a claim by writing a CDI spec whose
device adds an env variable (``TEST_DEVICE=<device>``) and a device node ``/dev/test-<device>``
(char 1:3, the numbers of /dev/null, so it exists on any host). Calls are recorded for asserts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import grpc
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from compute_domains._proto.dra.v1 import api_pb2 as dra
from compute_domains._proto.dra.v1 import api_pb2_grpc as dra_grpc
from compute_domains._proto.pluginregistration.v1 import api_pb2 as reg
from compute_domains._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc

DRIVER = "test.compute-domains.dev"


class _Registration(reg_grpc.RegistrationServicer):
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.status: list[bool] = []

    async def GetInfo(self, request: Any, context: Any) -> Any:
        return reg.PluginInfo(
            type="DRAPlugin",
            name=DRIVER,
            endpoint=self.endpoint,
            supported_versions=["v1.DRAPlugin", "v1beta1.DRAPlugin"],
        )

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.status.append(request.plugin_registered)
        return reg.RegistrationStatusResponse()


class TestDriver(dra_grpc.DRAPluginServicer):
    """Runs on one node root; ``prepared``/``unprepared`` record claim UIDs."""

    __test__ = False  # not a pytest class

    def __init__(
        self,
        client: AsyncClient,
        node: str,
        node_root: Path,
        devices: tuple[str, ...] = ("dev-0", "dev-1"),
    ) -> None:
        self.client = client
        self.node = node
        self.root = node_root
        self.devices = devices
        self.prepared: list[str] = []
        self.unprepared: list[str] = []
        self.fail_prepare = ""
        self.registration = _Registration(f"/var/lib/kubelet/plugins/{DRIVER}/dra.sock")
        self._server: grpc.aio.Server | None = None

    @property
    def cdi_dir(self) -> Path:
        return self.root / "var/run/cdi"

    async def start(self) -> None:
        plugin_dir = self.root / "var/lib/kubelet/plugins" / DRIVER
        plugin_dir.mkdir(parents=True, exist_ok=True)
        dra_sock = plugin_dir / "dra.sock"
        reg_sock = self.root / "var/lib/kubelet/plugins_registry" / f"{DRIVER}-reg.sock"
        for sock in (dra_sock, reg_sock):
            sock.unlink(missing_ok=True)
        server = grpc.aio.server()
        dra_grpc.add_DRAPluginServicer_to_server(self, server)
        reg_grpc.add_RegistrationServicer_to_server(self.registration, server)
        server.add_insecure_port(f"unix:{dra_sock}")
        server.add_insecure_port(f"unix:{reg_sock}")
        await server.start()
        self._server = server
        await self._publish()

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(None)
        for sock in (self.root / "var/lib/kubelet/plugins_registry").glob(f"{DRIVER}*"):
            sock.unlink(missing_ok=True)
        with contextlib.suppress(ApiError):
            await self.client.delete(ResourceSlice, f"{self.node}-{DRIVER}")

    async def _publish(self) -> None:
        body = ResourceSlice.from_dict(
            {
                "metadata": {"name": f"{self.node}-{DRIVER}"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": self.node,
                    "pool": {"name": self.node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": d, "attributes": {"index": {"int": i}}}
                        for i, d in enumerate(self.devices)
                    ],
                },
            }
        )
        with contextlib.suppress(ApiError):
            await self.client.create(body)

    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        resp = dra.NodePrepareResourcesResponse()
        for c in request.claims:
            if self.fail_prepare:
                resp.claims[c.uid].error = self.fail_prepare
                continue
            claim = await self.client.get(ResourceClaim, c.name, namespace=c.namespace)
            results = claim.status.allocation.devices.results  # type: ignore[union-attr]
            devices = []
            spec_devices = []
            for r in results:
                if r.driver != DRIVER:
                    continue
                name = f"{c.uid}-{r.device}"
                spec_devices.append(
                    {
                        "name": name,
                        "containerEdits": {
                            "env": [f"TEST_DEVICE={r.device}"],
                            "deviceNodes": [
                                {
                                    "path": f"/dev/test-{r.device}",
                                    "type": "c",
                                    "major": 1,
                                    "minor": 3,
                                }
                            ],
                        },
                    }
                )
                devices.append(
                    dra.Device(
                        request_names=[r.request],
                        pool_name=r.pool,
                        device_name=r.device,
                        cdi_device_ids=[f"test.compute-domains.dev/claim={name}"],
                    )
                )
            doc = {
                "cdiVersion": "0.5.0",
                "kind": "test.compute-domains.dev/claim",
                "devices": spec_devices,
            }
            self.cdi_dir.mkdir(parents=True, exist_ok=True)
            (self.cdi_dir / f"test-{c.uid}.json").write_text(json.dumps(doc))
            resp.claims[c.uid].devices.extend(devices)
            self.prepared.append(c.uid)
        return resp

    async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        resp = dra.NodeUnprepareResourcesResponse()
        for c in request.claims:
            (self.cdi_dir / f"test-{c.uid}.json").unlink(missing_ok=True)
            self.unprepared.append(c.uid)
            resp.claims[c.uid].error = ""
        await asyncio.sleep(0)
        return resp
