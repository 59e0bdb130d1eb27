"""Read a running sim's kube-scheduler or kube-controller-manager ``/metrics``.

Those two serve their metrics on their own secure ports (recorded in ``endpoints.json``,
``Endpoints.metrics``) with certificates they generate themselves, and answer only an identity
allowed to read ``/metrics``: the sim's admin (``system:masters``). The benchmark reads the
scheduler's counters around a formation (how many parked pods each kind of cluster event sent
back to be looked at, ``bench.schedevents``), which the API server's own ``/metrics`` does not
have. Loopback only; the admin's certificate and key go to a private temporary folder while the
TLS context loads them, and are removed with it.
"""

from __future__ import annotations

import base64
import ssl
import tempfile
from pathlib import Path

import httpx2 as httpx
import yaml

from compute_domains.sim import errors
from compute_domains.sim.state import Endpoints

TIMEOUT_S = 30.0
"""Bound on one read (a large scheduler's page is a few hundred KiB)."""


def read(endpoints: Endpoints, component: str) -> str:
    """The text of ``component``'s ``/metrics`` page.

    Raises:
        errors.SimError: the sim records no metrics address for it (a sim started before this
            was recorded), or it did not answer 200.
    """
    url = endpoints.metrics.get(component)
    if not url:
        raise errors.SimError(f"this sim records no /metrics address for {component}")
    user = yaml.safe_load(Path(endpoints.admin_kubeconfig).read_text())["users"][0]["user"]
    # The component's serving certificate is self-signed per start: not verified (loopback
    # only), as the sim's own health checks of these two do.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with tempfile.TemporaryDirectory(prefix="cd-metrics-") as scratch:
        crt, key = Path(scratch) / "admin.crt", Path(scratch) / "admin.key"
        crt.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.touch(mode=0o600)
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        ctx.load_cert_chain(crt, key)
    try:
        resp = httpx.get(url, verify=ctx, timeout=TIMEOUT_S)
    except httpx.HTTPError as err:
        raise errors.SimError(f"{component} /metrics: {err}") from err
    if resp.status_code != 200:
        raise errors.SimError(f"{component} /metrics answered {resp.status_code}")
    return resp.text
