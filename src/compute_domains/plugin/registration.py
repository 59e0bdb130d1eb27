"""The kubelet plugin-registration service (``pluginregistration.Registration``).

Served on ``<registrar dir>/compute-domain.nvidia.com-reg.sock``; the kubelet finds the socket,
asks ``GetInfo`` and reports the outcome with ``NotifyRegistrationStatus``. We announce the DRA
socket by its host path and list ``v1.DRAPlugin`` first, so a 1.34 kubelet picks v1 (it takes
the first entry it knows, in our order) and an older one still finds ``v1beta1.DRAPlugin``.
The service is started only after the DRA service listens, so the endpoint works once named.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import grpc

from compute_domains._proto.pluginregistration.v1 import api_pb2 as reg
from compute_domains._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from compute_domains.api import names

logger = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
"""``PluginInfo.type`` of a DRA driver."""
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
"""The DRA services we serve, preferred first."""


class RegistrationServicer(reg_grpc.RegistrationServicer):
    """Answers the kubelet's registration questions and remembers its verdict."""

    def __init__(self, endpoint: Path, node: str) -> None:
        """Args: endpoint: host path of the DRA socket; node: for logs."""
        self._endpoint = endpoint
        self._node = node
        self.registered = asyncio.Event()
        """Set once the kubelet reported a successful registration."""

    async def GetInfo(self, request: reg.InfoRequest, context: Any) -> reg.PluginInfo:
        """Who we are and where our DRA service listens."""
        return reg.PluginInfo(
            type=PLUGIN_TYPE,
            name=names.DRIVER_NAME,
            endpoint=str(self._endpoint),
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    async def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: Any
    ) -> reg.RegistrationStatusResponse:
        """Record the kubelet's verdict; a refusal is logged as an error."""
        extra = {"node": self._node}
        if request.plugin_registered:
            self.registered.set()
            logger.info("registered with the kubelet", extra=extra)
        else:
            self.registered.clear()
            logger.error("the kubelet refused the registration: %s", request.error, extra=extra)
        return reg.RegistrationStatusResponse()


def registration_server(servicer: RegistrationServicer) -> grpc.aio.Server:
    """A gRPC server carrying the registration service (not yet listening)."""
    server = grpc.aio.server()
    reg_grpc.add_RegistrationServicer_to_server(servicer, server)
    return server
