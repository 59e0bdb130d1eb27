#!/usr/bin/env bash
# Regenerate the Python protobuf/gRPC stubs in src/compute_domains/_proto from proto/.
#
# proto/ holds .proto files written for this project from shared/spec/kubelet-dra-contract.md §1.
# protoc sees them under the virtual root "compute_domains/_proto" (-I<virtual>=<disk>), so every
# generated import reads "from compute_domains._proto.<dir> import api_pb2" and every descriptor
# file name is unique (all four files are called api.proto). protoc writes *_pb2.py, *_pb2.pyi and
# *_pb2_grpc.py; the typed *_pb2_grpc.pyi files are written by the small generator at the end,
# because protoc has no typed output for gRPC services.
#
# Usage: scripts/gen_proto.sh   (from anywhere; uses the python on PATH, e.g. the project venv)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/src/compute_domains/_proto"
python="${PYTHON:-python}"

cd "$root"
rm -rf "$out"
mkdir -p "$out"

mapfile -t protos < <(find proto -name '*.proto' | sort)
"$python" -m grpc_tools.protoc \
  -Icompute_domains/_proto=proto \
  --python_out=src --pyi_out=src --grpc_python_out=src \
  "${protos[@]}"

# Every generated folder is a package.
find "$out" -type d | while read -r dir; do
  if [[ "$dir" == "$out" ]]; then
    printf '%s\n' '"""Generated protobuf/gRPC stubs for the kubelet wire contract; never edit by hand.' \
      '' \
      'Regenerate with scripts/gen_proto.sh from the .proto files in proto/.' \
      '"""' >"$dir/__init__.py"
  else
    printf '"""Generated stubs (scripts/gen_proto.sh)."""\n' >"$dir/__init__.py"
  fi
done

PYTHONPATH="$root/src" "$python" - "$out" <<'PY'
"""Write a typed .pyi for each generated *_pb2_grpc.py from the services in its descriptor."""

import importlib
import sys
from pathlib import Path

out = Path(sys.argv[1])
src = out.parents[1]
HEADER = '"""Typed interface of the generated gRPC module (written by scripts/gen_proto.sh)."""\n'

for grpc_py in sorted(out.rglob("*_pb2_grpc.py")):
    pb2_mod = ".".join(grpc_py.relative_to(src).with_suffix("").parts)[: -len("_grpc")]
    pb2 = importlib.import_module(pb2_mod)
    pkg, _, name = pb2_mod.rpartition(".")
    lines = [
        HEADER,
        "import collections.abc",
        "import typing",
        "",
        "import grpc",
        "import grpc.aio",
        "",
        f"from {pkg} import {name}",
        "",
    ]
    for svc in pb2.DESCRIPTOR.services_by_name.values():
        sync_attrs, async_attrs, servicer = [], [], []
        for m in svc.methods:
            req = f"{name}.{m.input_type.name}"
            resp = f"{name}.{m.output_type.name}"
            kind = ("Stream" if m.client_streaming else "Unary") + (
                "Stream" if m.server_streaming else "Unary"
            )
            sync_attrs.append(f"    {m.name}: grpc.{kind}MultiCallable[{req}, {resp}]")
            async_attrs.append(f"    {m.name}: grpc.aio.{kind}MultiCallable[{req}, {resp}]")
            arg = f"request_iterator: collections.abc.Iterator[{req}]" if m.client_streaming else f"request: {req}"
            if m.server_streaming:
                ret = f"collections.abc.Iterator[{resp}] | collections.abc.AsyncIterator[{resp}]"
            else:
                ret = f"{resp} | collections.abc.Awaitable[{resp}]"
            servicer.append(
                f"    def {m.name}(self, {arg}, context: typing.Any) -> {ret}: ..."
            )
        lines += [
            f"class {svc.name}Stub:",
            "    def __init__(self, channel: grpc.Channel | grpc.aio.Channel) -> None: ...",
            *sync_attrs,
            "",
            "# Not defined at run time: cast a stub built on a grpc.aio channel to this type.",
            f"class {svc.name}AsyncStub:",
            "    def __init__(self, channel: grpc.aio.Channel) -> None: ...",
            *async_attrs,
            "",
            "# Override with plain or async methods; context is grpc.ServicerContext or its aio twin.",
            f"class {svc.name}Servicer:",
            *servicer,
            "",
            f"def add_{svc.name}Servicer_to_server(",
            f"    servicer: {svc.name}Servicer, server: grpc.Server | grpc.aio.Server",
            ") -> None: ...",
            "",
        ]
    grpc_py.with_suffix(".pyi").write_text("\n".join(lines))
PY

echo "generated: $(find "$out" -type f -name '*.py*' | wc -l) files under ${out#"$root"/}"
