#!/usr/bin/env bash
# Run the three GPU-node validations (node, imex-channels, nccl) in one go on a GPU machine.
#
#   scripts/gpu-validate.sh RESULTS_DIR
#
# Writes to RESULTS_DIR: summary.txt (machine facts, the three text reports, exit codes),
# node.json, imex-channels.json, nccl.json, and artifacts.tar.gz (the CDI specs our plugin code
# wrote, every workload container's log, the NCCL rank logs). Needs root for imex-channels.
# Installs nothing: it runs this checkout's source with an interpreter that already has the
# validation's few dependencies (click, PyYAML, nvidia-ml-py; torch for nccl; cuda-python for
# imex-channels): $PYTHON if set, else this repo's .venv, else python3.
# NVLink multicast stays off in everything started here (NCCL_NVLS_ENABLE=0).
# Exit status: 0 when no validation failed, 1 otherwise, 3 when there is no GPU here.
set -uo pipefail

out=${1:?usage: scripts/gpu-validate.sh RESULTS_DIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/cd-gpu-validate.XXXXXX)
summary=$out/summary.txt

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}"

deps='import click, yaml, pynvml'
py=${PYTHON:-}
if [[ -z $py ]]; then
  for candidate in "$repo/.venv/bin/python" python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "$deps" 2>/dev/null; then
      py=$candidate
      break
    fi
  done
fi
if [[ -z $py ]] || ! "$py" -c "$deps"; then
  echo "gpu-validate: no python with click, PyYAML and nvidia-ml-py found; set PYTHON" >&2
  exit 1
fi

section() { printf '\n===== %s =====\n' "$*" >>"$summary"; }

{
  echo "cdctl validate on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "repo: $repo ($(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo 'no git'))"
  echo "kernel: $(uname -r); user: $(id -un)"
  echo "python: $py ($("$py" -c 'import sys; print(sys.version.split()[0])'))"
  "$py" - <<'EOF'
import importlib
for name, mod in [("torch", "torch"), ("cuda-python", "cuda.bindings.driver"),
                  ("cuda-python (old)", "cuda.cuda"), ("nvidia-ml-py", "pynvml")]:
    try:
        m = importlib.import_module(mod)
        parent = importlib.import_module(mod.rsplit(".", 1)[0]) if "." in mod else m
        print(f"{name}: importable as {mod} {getattr(parent, '__version__', '')}")
    except Exception as err:
        print(f"{name}: {mod} not importable ({type(err).__name__})")
try:
    import torch
    print("torch.cuda:", torch.version.cuda, "devices:", torch.cuda.device_count(),
          "nccl:", ".".join(map(str, torch.cuda.nccl.version())))
except Exception as err:
    print("torch.cuda: n/a", err)
EOF
} >"$summary" 2>&1

section "nvidia-smi"
{ nvidia-smi -L; nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version --format=csv; nvidia-smi topo -m; } >>"$summary" 2>&1
section "/proc/devices (nvidia) and driver params"
{ grep -i nvidia /proc/devices; grep -i imex /proc/driver/nvidia/params; ls -l /dev/nvidia* /dev/nvidia-caps* 2>&1; } >>"$summary" 2>&1

status=0
# run LABEL COMMAND [ARGS...]: the report goes to summary.txt, its JSON to LABEL.json.
run() {
  local label=$1 name=$2
  shift 2
  section "cdctl validate $name $*"
  local start=$SECONDS
  "$py" -m compute_domains.cli.validate "$name" --json-file "$out/$label.json" "$@" >>"$summary" 2>&1
  local rc=$?
  echo "[exit $rc after $((SECONDS - start))s]" >>"$summary"
  if ((rc == 3)); then
    status=3
  elif ((rc != 0 && status != 3)); then
    status=1
  fi
  return $rc
}

run node node
run imex-channels imex-channels --work-dir "$work/imex-channels"
if (($? == 1)); then
  # Tells a driver quirk from an injection failure: the same check, every container all GPUs.
  run imex-channels-all-gpus imex-channels --all-gpus --work-dir "$work/imex-channels-all-gpus"
fi
run nccl nccl --work-dir "$work/nccl"

tar -C "$work" -czf "$out/artifacts.tar.gz" . 2>>"$summary"
rm -rf "$work"
section "done: exit $status"
cat "$summary"
exit $status
