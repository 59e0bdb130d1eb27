#!/usr/bin/env bash
# Build the driver's container image without a container engine (docs/image.md).
#
#   scripts/build-image.sh [--force] [--out DIR]   build DIR/image (OCI layout, tag = version)
#   scripts/build-image.sh --umoci-path            make sure umoci is built; print its path
#
# One image runs every component (`cdctl controller|plugin|daemon run`, `cdctl daemon check`):
#   layer 1  Debian bookworm minbase made by debootstrap, plus python3 (3.11) and python3-venv;
#   layer 2  /opt/compute-domains, a venv holding this checkout's wheel and its dependencies,
#            installed from wheels fetched on the host for CPython 3.11 on this architecture.
# Packed with umoci into DIR/image (default build/image) and DIR/compute-domains-VERSION.oci.tar
# (an oci-archive). Needs root (debootstrap, chroot), Go >= 1.24, python3 >= 3.11 with pip.
# Set-up from a fresh machine: installs debootstrap with apt-get if missing; builds umoci once
# into ${XDG_CACHE_HOME:-~/.cache}/compute-domains/image-tools/<pin-hash>/. The debootstrap
# package tarball and the finished base layer are cached in .../compute-domains/image/, so a
# rebuild only installs the wheel. Unchanged inputs (src/, pyproject.toml, README.md, this script)
# leave an existing image alone unless --force. Exit status: 0 built or up to date, 1 failed.
set -Eeuo pipefail

UMOCI_MODULE=github.com/opencontainers/umoci
UMOCI_VERSION=v0.6.0
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE_PACKAGES=python3,python3-venv,ca-certificates
BASE_RECIPE=1 # bump when the base clean-up below changes
VENV=/opt/compute-domains
IMAGE_PATH=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

repo=$(cd "$(dirname "$0")/.." && pwd)
out=$repo/build
force=0
print_umoci=0
while (($#)); do
  case $1 in
    --force) force=1 ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    --umoci-path) print_umoci=1 ;;
    -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-image: error: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

cache=${XDG_CACHE_HOME:-$HOME/.cache}/compute-domains
python=${PYTHON:-python3}
started=$SECONDS
work=""
ticker=""
log=/dev/null
reported=0
failed=""
trap 'failed="line $LINENO: $BASH_COMMAND"' ERR

note() { printf 'build-image: %s\n' "$*" >&2; }

die() {
  # The one line that says what failed; the step's log tail comes first, above it.
  if [[ -s $log && $log != /dev/null ]]; then tail -n 15 "$log" | sed 's/^/  | /' >&2; fi
  printf 'build-image: error: %s\n' "$*" >&2
  reported=1
  exit 1
}

cleanup() {
  local rc=$? m
  set +e
  if ((rc != 0 && !reported)); then
    printf 'build-image: error: %s failed (exit %d)\n' "${failed:-a command}" "$rc" >&2
  fi
  [[ -n $ticker ]] && kill "$ticker" 2>/dev/null
  if [[ -n $work && -d $work ]]; then
    # debootstrap mounts proc and sys inside its target; never delete through a mount point.
    for m in $(findmnt -rn -o TARGET | grep -F "$work/" | sort -r); do umount -l "$m"; done
    rm -rf --one-file-system "$work"
  fi
  return "$rc"
}
trap cleanup EXIT

# step NAME CMD...: run CMD with its output in the step's log, a progress line every 15 s.
step() {
  local name=$1 t0=$SECONDS rc=0
  shift
  log=$out/image-logs/$(tr -c 'a-z0-9\n' '-' <<<"${name,,}" | tr -s -).log
  note "$name ..."
  (
    while sleep 15; do
      printf 'build-image:   ... %s (%ds) %s\n' "$name" $((SECONDS - t0)) \
        "$(tail -n 1 "$log" 2>/dev/null | cut -c1-90)" >&2
    done
  ) &
  ticker=$!
  "$@" >"$log" 2>&1 || rc=$?
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
  ticker=""
  ((rc == 0)) || die "step '$name' failed (exit $rc); full log: $log"
  note "$name done ($((SECONDS - t0)) s)"
}

hash_of() { sha256sum | cut -c1-16; }

need_root() {
  [[ $(id -u) == 0 ]] || die "needs root (debootstrap and chroot); run it as root"
}

ensure_umoci() {
  local goversion dir
  command -v go >/dev/null || die "go is not on PATH (Go >= 1.24 builds umoci $UMOCI_VERSION)"
  goversion=$(go env GOVERSION)
  dir=$cache/image-tools/$(printf '%s@%s %s %s' "$UMOCI_MODULE" "$UMOCI_VERSION" "$goversion" \
    "$(go env GOOS GOARCH | tr '\n' ' ')" | hash_of)
  umoci=$dir/bin/umoci
  [[ -x $umoci ]] && return 0
  # `go install ...@version` refuses modules with replace directives (umoci has one), so the
  # module is fetched through the module proxy and built as the main module, go.sum-verified.
  mkdir -p "$dir"
  local tmp
  tmp=$(mktemp -d "$dir/build.XXXXXX")
  step "build umoci $UMOCI_VERSION (once)" build_umoci "$tmp"
  mkdir -p "$dir/bin"
  mv "$tmp/umoci" "$umoci"
  rm -rf "$tmp"
}

build_umoci() {
  local src
  src=$(go mod download -json "$UMOCI_MODULE@$UMOCI_VERSION" | "$python" -c \
    'import json, sys; print(json.load(sys.stdin)["Dir"])') || return
  (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath \
    -ldflags "-s -w" -o "$1/umoci" ./cmd/umoci) || return
}

ensure_debootstrap() {
  command -v debootstrap >/dev/null && return 0
  command -v apt-get >/dev/null || die "debootstrap is missing and there is no apt-get to install it"
  step "install debootstrap (apt-get)" \
    bash -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap'
}

input_hash() {
  # Everything the image is made from: the source tree as git sees it (untracked files too,
  # ignored ones not) plus this script; no git, then every file under src/.
  (
    cd "$repo"
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
      git ls-files -z -co --exclude-standard -- src pyproject.toml README.md scripts/build-image.sh
    else
      find src pyproject.toml README.md scripts/build-image.sh -type f \
        ! -path '*/__pycache__/*' -print0
    fi | sort -zu | while IFS= read -r -d '' f; do [[ -f $f ]] && printf '%s\0' "$f"; done \
      | xargs -0 sha256sum
  ) | hash_of
}

# base_layer TAR: Debian minbase + python3 as a layer tarball, cached by its recipe.
base_layer() {
  local arch key debs
  arch=$(dpkg --print-architecture)
  key=$(printf '%s %s %s %s %s' "$SUITE" "$BASE_PACKAGES" "$arch" "$MIRROR" "$BASE_RECIPE" \
    | hash_of)
  base_tar=$cache/image/base-$SUITE-$arch-$key.tar
  debs=$cache/image/debootstrap-$SUITE-$arch-$key.tgz
  if [[ -f $base_tar ]]; then
    note "base layer cached: $base_tar"
    return 0
  fi
  mkdir -p "$cache/image"
  ensure_debootstrap
  if [[ ! -f $debs ]]; then
    step "download Debian $SUITE packages (debootstrap --make-tarball)" \
      debootstrap --variant=minbase --include="$BASE_PACKAGES" --arch="$arch" \
      --make-tarball="$debs.tmp" "$SUITE" "$work/debs" "$MIRROR"
    mv "$debs.tmp" "$debs"
  fi
  step "install Debian $SUITE minbase + python3 (debootstrap)" \
    debootstrap --variant=minbase --include="$BASE_PACKAGES" --arch="$arch" \
    --unpack-tarball="$debs" "$SUITE" "$work/base" "$MIRROR"
  local b=$work/base
  # What a runtime supplies (devices, DNS, hostname) or what only a build needs, out.
  rm -rf "${b:?}"/dev/* "$b"/proc/* "$b"/sys/* "$b"/tmp/* "$b"/var/tmp/* \
    "$b"/var/lib/apt/lists/* "$b"/var/cache/apt/*.bin "$b"/var/cache/apt/archives/*.deb \
    "$b"/var/cache/debconf/*-old "$b"/var/lib/dpkg/*-old "$b"/usr/share/man/* "$b"/usr/share/info/*
  find "$b/var/log" -type f -delete
  find "$b/usr/share/doc" -type f ! -name copyright -delete
  : >"$b/etc/resolv.conf"
  : >"$b/etc/hostname"
  : >"$b/etc/machine-id"
  step "pack the base layer" \
    tar --numeric-owner --xattrs --sort=name -C "$b" -cf "$base_tar.tmp" .
  mv "$base_tar.tmp" "$base_tar"
  rm -rf --one-file-system "$b"
}

# wheels DIR: this checkout's wheel plus its dependencies for CPython 3.11 on this architecture.
wheels() {
  local dir=$1 machine platforms=() v deps key
  machine=$(uname -m)
  for v in $(seq 17 36); do platforms+=(--platform "manylinux_2_${v}_$machine"); done
  platforms+=(--platform "manylinux2014_$machine")
  mkdir -p "$work/src" "$dir"
  tar -C "$repo" --exclude=__pycache__ --exclude='*.egg-info' -cf - pyproject.toml README.md src \
    | tar -C "$work/src" -xf -
  # setuptools >= 70.1 builds wheels by itself: use the host's rather than fetch one each time.
  local isolation=(--no-build-isolation)
  "$python" -c 'import setuptools, sys
sys.exit(tuple(map(int, setuptools.__version__.split(".")[:2])) < (70, 1))' 2>/dev/null \
    || isolation=()
  step "build the compute-domains wheel" \
    "$python" -m pip wheel --no-deps "${isolation[@]}" --wheel-dir "$dir" "$work/src"
  wheel=$(ls "$dir"/compute_domains-*.whl)
  deps=$("$python" -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
print("\n".join(sorted(l for l in z.read(meta).decode().splitlines() if l.startswith("Requires-Dist:")
                        and "extra ==" not in l)))' "$wheel")
  key=$(printf '%s\n%s cp311\n' "$deps" "$machine" | hash_of)
  local cached=$cache/image/wheels-$key
  if [[ ! -d $cached ]]; then
    step "download dependency wheels for CPython 3.11 (PyPI)" \
      env -u PIP_FIND_LINKS "$python" -m pip download --only-binary=:all: --implementation cp \
      --python-version 3.11 --abi cp311 --abi abi3 --abi none "${platforms[@]}" \
      --dest "$cached.tmp" "$wheel"
    rm -f "$cached.tmp"/compute_domains-*.whl
    mv "$cached.tmp" "$cached"
  else
    note "dependency wheels cached: $cached"
  fi
  cp "$cached"/*.whl "$dir"/
}

in_root() { # run a command inside the image's root, with the image's environment only
  env -i PATH="$IMAGE_PATH" HOME=/root LANG=C.UTF-8 chroot "$work/rootfs" "$@"
}

# Step bodies run in an `||` context, where `set -e` does not apply: each line checks itself.
install_app() {
  in_root /usr/bin/python3 -m venv "$VENV" || return
  in_root "$VENV/bin/pip" install --no-cache-dir --no-index --find-links /tmp/wheels \
    "compute-domains==$version" || return
  # Nothing runs pip at run time; without it and setuptools the layer is ~25 MB smaller.
  in_root "$VENV/bin/python" -m pip uninstall --yes pip setuptools || return
}

write_oci() {
  local oci=$1 img=$1:$version revision created
  revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
  if [[ -n $(git -C "$repo" status --porcelain -- src pyproject.toml 2>/dev/null) ]]; then
    revision+="-dirty"
  fi
  created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  "$umoci" init --layout "$oci" || return
  "$umoci" new --image "$img" || return
  "$umoci" raw add-layer --image "$img" \
    --history.created_by "debootstrap --variant=minbase --include=$BASE_PACKAGES $SUITE" \
    "$base_tar" || return
  "$umoci" raw add-layer --image "$img" \
    --history.created_by "python3 -m venv $VENV; pip install compute-domains==$version" \
    "$work/app.tar" || return
  "$umoci" config --image "$img" --no-history --author compute-domains --created "$created" \
    --config.entrypoint cdctl --config.cmd=--help --config.workingdir / \
    --config.env "PATH=$IMAGE_PATH" --config.env "VIRTUAL_ENV=$VENV" \
    --config.env LANG=C.UTF-8 --config.env PYTHONUNBUFFERED=1 \
    --config.env PYTHONDONTWRITEBYTECODE=1 \
    --config.label org.opencontainers.image.title=compute-domains \
    --config.label "org.opencontainers.image.description=ComputeDomains DRA driver (cdctl)" \
    --config.label "org.opencontainers.image.version=$version" \
    --config.label "org.opencontainers.image.revision=$revision" \
    --config.label "org.opencontainers.image.created=$created" \
    --config.label org.opencontainers.image.licenses=Apache-2.0 \
    --config.label "org.opencontainers.image.base.name=debian:$SUITE (debootstrap minbase)" \
    --manifest.annotation "org.opencontainers.image.version=$version" \
    --manifest.annotation "org.opencontainers.image.revision=$revision" \
    --manifest.annotation "org.opencontainers.image.created=$created" || return
  "$umoci" gc --layout "$oci" || return
  chmod -R a+rX "$oci" # umoci writes blobs 0600; let any user read (skopeo, crane) the layout
}

main() {
  need_root
  mkdir -p "$cache/image" "$out/image-logs"
  exec 9>"$cache/image/build.lock"
  flock 9 # one build at a time (make image and the e2e test may race)
  work=$(mktemp -d "${TMPDIR:-/var/tmp}/cd-image.XXXXXX")
  ensure_umoci
  if ((print_umoci)); then
    echo "$umoci"
    exit 0
  fi
  version=$("$python" -c 'import sys, tomllib
print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$repo/pyproject.toml") \
    || die "cannot read the version in pyproject.toml with $python (needs Python >= 3.11)"
  local inputs stamp=$out/image.inputs
  inputs=$(input_hash)
  if ((!force)) && [[ -f $out/image/index.json && -f $stamp && $(cat "$stamp") == "$inputs" ]]; then
    note "image $version is up to date in $out/image (inputs unchanged; --force rebuilds)"
    exit 0
  fi
  base_layer

  wheels "$work/rootfs-wheels"
  mkdir -p "$work/rootfs"
  step "unpack the base layer" tar --numeric-owner --xattrs -C "$work/rootfs" -xf "$base_tar"
  # The few device nodes pip and python expect, made inside the build root (not in a layer).
  local d
  for d in null:1:3 zero:1:5 random:1:8 urandom:1:9; do
    mknod -m 666 "$work/rootfs/dev/${d%%:*}" c "$(cut -d: -f2 <<<"$d")" "${d##*:}"
  done
  mv "$work/rootfs-wheels" "$work/rootfs/tmp/wheels"
  step "install compute-domains $version into $VENV" install_app
  local got
  got=$(in_root cdctl --version 2>&1) || die "cdctl does not run in the image: $got"
  note "the image's cdctl runs: $got"
  step "pack the application layer" \
    tar --numeric-owner --xattrs --sort=name -C "$work/rootfs" -cf "$work/app.tar" ./opt

  step "write the OCI layout (umoci)" write_oci "$work/oci"
  local archive=$out/compute-domains-$version.oci.tar
  rm -rf "$out/image" "$stamp"
  mv "$work/oci" "$out/image"
  step "write the oci-archive" tar --sort=name -C "$out/image" -cf "$archive.tmp" .
  mv "$archive.tmp" "$archive"
  echo "$inputs" >"$stamp"
  note "built compute-domains:$version in $((SECONDS - started)) s"
  note "  OCI layout  $out/image (tag $version)"
  note "  oci-archive $archive ($(du -h "$archive" | cut -f1))"
}

main
