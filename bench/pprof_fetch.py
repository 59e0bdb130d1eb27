#!/usr/bin/env python3
"""Fetch Go CPU profiles of a running sim's kube-scheduler and kube-apiserver (issue 28 point 3).

A scale run that misses its target must name the process that spends the time; a Go profile
also names the function. The sim starts both with ``--profiling=true``; their
``/debug/pprof/profile`` needs an identity allowed to read it, which the sim's admin
(``system:masters``) is. Standard library only, so it runs from a bench bundle's venv as it is.

Usage (``SIM`` is ``$CD_SIM_HOME/sims/<name>``, by default
``~/.local/state/compute-domains/sims/<name>``)::

    python3 bench/pprof_fetch.py --sim SIM --seconds 30 --out DIR [--component kube-scheduler]

Writes ``DIR/<component>-<unix time>.pprof`` (gzip'd protobuf: ``go tool pprof -top FILE``).
The components are profiled at the same time, each in its own thread.
"""

from __future__ import annotations

import argparse
import base64
import json
import ssl
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import yaml

COMPONENTS = ("kube-scheduler", "kube-apiserver")


def _port(pid: int) -> int:
    """The ``--secure-port`` a running component was started with."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    for arg in argv:
        if arg.startswith(b"--secure-port="):
            return int(arg.split(b"=", 1)[1])
    raise SystemExit(f"pid {pid} has no --secure-port")


def _context(admin_kubeconfig: Path, scratch: Path) -> ssl.SSLContext:
    """TLS with the admin's client certificate; the components' serving certificates are
    self-signed per start, so they are not verified (loopback only)."""
    user = yaml.safe_load(admin_kubeconfig.read_text())["users"][0]["user"]
    crt, key = scratch / "admin.crt", scratch / "admin.key"
    crt.write_bytes(base64.b64decode(user["client-certificate-data"]))
    key.touch(mode=0o600)
    key.write_bytes(base64.b64decode(user["client-key-data"]))
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(crt, key)
    return ctx


def _fetch(ctx: ssl.SSLContext, url: str, out: Path, seconds: int, errors: list[str]) -> None:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=seconds + 30) as resp:
            out.write_bytes(resp.read())
        print(f"{out}: {out.stat().st_size} bytes", flush=True)
    except OSError as err:
        errors.append(f"{url}: {err}")


def main() -> int:
    """Fetch the profiles; exit 1 when any could not be read."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", type=Path, required=True, help="the sim's folder")
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--component", action="append", choices=COMPONENTS)
    args = ap.parse_args()
    cp = args.sim / "controlplane"
    endpoints = json.loads((cp / "endpoints.json").read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        ctx = _context(Path(endpoints["admin_kubeconfig"]), Path(scratch))
        threads = []
        stamp = int(time.time())
        for name in args.component or COMPONENTS:
            port = _port(endpoints["pids"][name])
            url = f"https://127.0.0.1:{port}/debug/pprof/profile?seconds={args.seconds}"
            out = args.out / f"{name}-{stamp}.pprof"
            t = threading.Thread(target=_fetch, args=(ctx, url, out, args.seconds, errors))
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
    for line in errors:
        print(line, flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
