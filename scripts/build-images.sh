#!/usr/bin/env bash
# Build edgetrain's container images with podman or Docker; `make images`, `make images-core`,
# `make container-engine` and tests/images call this script, so the tests walk the user's path.
#
#   scripts/build-images.sh --engine-only          install podman (root + apt) if no engine
#   scripts/build-images.sh [IMAGE ...]            IMAGE: operator node-agent estimator trainer
#                                                  (default: operator node-agent)
# Environment:
#   CONTAINER_ENGINE  podman | docker. Default: podman if installed, else a running Docker,
#                     else podman installed with apt (root only).
#   REGISTRY, TAG     tags are $REGISTRY/<image>:$TAG (default localhost/edgetrain, the version
#                     in pyproject.toml).
#   BASE              base of operator, node-agent, estimator. Default: a Debian bookworm base
#                     made here with mmdebstrap, so no container registry is needed; set e.g.
#                     BASE=python:3.11-slim-bookworm to use the official image instead.
#   ESTIMATOR_BASE    default: $BASE (PyPI's x86-64 torch wheel brings the CUDA libraries).
#   TRAINER_BASE      default: NVIDIA's L4T PyTorch image (see images/README.md).
#   PIP_OPTIONS       pip options inside the build. Default with podman: the wheel cache below
#                     (--no-index --find-links /wheels); with Docker: PyPI.
# Prints "built <ref> <bytes> <seconds>" per image.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${EDGETRAIN_CACHE_DIR:-$HOME/.cache/edgetrain}"
PYTHON="${PYTHON:-python3}"
# Loaded instead of /etc/containers/containers.conf: the host's files are never edited.
export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/images/containers.conf}"
REGISTRY="${REGISTRY:-localhost/edgetrain}"
TAG="${TAG:-$(awk -F'"' '$1 ~ /^version *= */ {print $2; exit}' "$ROOT/pyproject.toml")}"

# Bump when the base's package list or excludes change (the cached tar is keyed by it).
BASE_REV=5
LOCAL_BASE="localhost/debian-py:bookworm-r$BASE_REV"
APT_PACKAGES=(podman runc)

log() { echo "build-images: $*" >&2; }
die() { log "$*"; exit 1; }

as_root() {
  if [[ "$(id -u)" == 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"
  else return 1; fi
}

apt_install() {  # packages...
  command -v apt-get >/dev/null || return 1
  log "installing $* with apt"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
    && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends "$@" >/dev/null
}

pick_engine() {
  if [[ -n "${CONTAINER_ENGINE:-}" ]]; then ENGINE="$CONTAINER_ENGINE"
  elif command -v podman >/dev/null; then ENGINE=podman
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then ENGINE=docker
  else ENGINE=podman
  fi
  if ! command -v "$ENGINE" >/dev/null; then
    [[ "$ENGINE" == podman ]] || die "$ENGINE is not installed"
    apt_install "${APT_PACKAGES[@]}" || die "no container engine: install podman or Docker"
  fi
  "$ENGINE" info >/dev/null 2>&1 || die "$ENGINE does not work: $("$ENGINE" info 2>&1 | tail -3)"
}

can_run_arm64() {
  [[ "$(uname -m)" == aarch64 ]] || grep -qs '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64
}

image_exists() { "$ENGINE" image inspect "$1" >/dev/null 2>&1; }

# A Debian bookworm base with python3 (+venv), made from Debian's packages: no registry needed.
make_local_base() {
  image_exists "$LOCAL_BASE" && return
  local tar="$CACHE/images/debian-py-bookworm-r$BASE_REV.tar"
  if [[ ! -f "$tar" ]]; then
    command -v mmdebstrap >/dev/null || apt_install mmdebstrap \
      || die "mmdebstrap is needed for the local base (or set BASE=python:3.11-slim-bookworm)"
    local mirrors=()
    # The host's own sources where it is bookworm (snapshot mirrors, proxies), else Debian's.
    if [[ -f /etc/apt/sources.list.d/debian.sources ]] \
        && grep -q 'VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null; then
      mirrors=(/etc/apt/sources.list.d/debian.sources)
    else
      mirrors=("deb http://deb.debian.org/debian bookworm main"
               "deb http://deb.debian.org/debian-security bookworm-security main")
    fi
    mkdir -p "$(dirname "$tar")"
    log "making the Debian base with mmdebstrap (about a minute)"
    # essential (not minbase): no apt in the image, nothing installs packages at run time.
    # gconv: glibc's iconv modules (9 MB); Python's codecs do not use them.
    # usrmerge brings full perl (47 MB) for a one-off conversion: purged once the tree is
    # made, with usr-is-merged standing in for it in init-system-helpers' dependency.
    mmdebstrap --quiet --format=tar --variant=essential --include=python3,python3-venv,ca-certificates,libstdc++6,usr-is-merged \
      --aptopt='APT::Install-Recommends "false"' \
      --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/info/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      --dpkgopt='path-exclude=/usr/share/lintian/*' \
      --dpkgopt='path-exclude=/usr/lib/*/gconv/*' \
      --customize-hook='chroot "$1" dpkg --purge usrmerge libfile-find-rule-perl \
          libnumber-compare-perl libtext-glob-perl perl libperl5.36 perl-modules-5.36' \
      bookworm "$tar.tmp" "${mirrors[@]}"
    mv "$tar.tmp" "$tar"
  fi
  "$ENGINE" import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' "$tar" "$LOCAL_BASE" >/dev/null
}

# Wheels for the images' dependencies, downloaded once per pyproject.toml (cp311 manylinux).
wheel_dir() {  # arch (x86_64|aarch64), extras ("" or "train")
  local arch="$1" extras="$2"
  local key
  key="$(cat "$ROOT/pyproject.toml" "$ROOT/images/requirements.py" | sha256sum | cut -c1-16)"
  local dir="$CACHE/wheels/$key-cp311-$arch${extras:+-${extras// /-}}"
  if [[ ! -f "$dir/.complete" ]]; then
    "$PYTHON" -m pip --version >/dev/null 2>&1 \
      || die "$PYTHON has no pip for the wheel cache: set PYTHON (e.g. .venv/bin/python)"
    local platforms=() i
    for i in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${i}_$arch"); done
    platforms+=(--platform "manylinux2014_$arch")
    log "downloading wheels into $dir"
    rm -rf "$dir" && mkdir -p "$dir"
    "$PYTHON" "$ROOT/images/requirements.py" "$ROOT/pyproject.toml" $extras >"$dir/requirements.txt"
    # setuptools and wheel: pip builds the package itself from /wheels too (build isolation).
    "$PYTHON" -m pip download --quiet --dest "$dir" --only-binary=:all: \
      --python-version 3.11 --implementation cp --abi cp311 "${platforms[@]}" \
      -r "$dir/requirements.txt" "setuptools>=68" wheel
    touch "$dir/.complete"
  fi
  echo "$dir"
}

build() {  # image dockerfile base arch extras
  local name="$1" file="$2" base="$3" arch="$4" extras="$5"
  local ref="$REGISTRY/$name:$TAG" args=() opts="${PIP_OPTIONS-}"
  args+=(--network host -f "$ROOT/images/$file" -t "$ref")
  [[ -n "$base" ]] && args+=(--build-arg "BASE=$base")
  [[ "$arch" != x86_64 ]] && args+=(--platform linux/arm64)
  if [[ "$ENGINE" == podman ]]; then
    # Build-time mounts only: the pip settings and certificates never enter a layer.
    [[ -f /etc/pip.conf ]] && args+=(-v /etc/pip.conf:/etc/pip.conf:ro)
    [[ -d /etc/ssl/certs ]] && args+=(-v /etc/ssl/certs:/etc/ssl/certs:ro)
    if [[ -z "${PIP_OPTIONS+set}" ]]; then
      args+=(-v "$(wheel_dir "$arch" "$extras"):/wheels:ro")
      opts="--no-index --find-links /wheels"
    fi
  fi
  args+=(--build-arg "PIP_OPTIONS=$opts")
  local start=$SECONDS
  log "$ENGINE build $ref"
  "$ENGINE" build "${args[@]}" "$ROOT" >&2
  local size
  size="$("$ENGINE" image inspect --format '{{.Size}}' "$ref")"
  echo "built $ref $size $((SECONDS - start))"
}

pick_engine
[[ "${1:-}" == "--engine-only" ]] && { log "engine: $ENGINE"; exit 0; }
IMAGES=("$@")
[[ ${#IMAGES[@]} -gt 0 ]] || IMAGES=(operator node-agent)

if [[ -z "${BASE:-}" ]]; then make_local_base; BASE="$LOCAL_BASE"; fi
for image in "${IMAGES[@]}"; do
  case "$image" in
    operator) build operator operator.Dockerfile "$BASE" x86_64 "" ;;
    node-agent) build node-agent node-agent.Dockerfile "$BASE" x86_64 "" ;;
    estimator) build estimator estimator-cuda.Dockerfile "${ESTIMATOR_BASE:-$BASE}" x86_64 train ;;
    trainer)
      # NVIDIA's L4T PyTorch images (the Dockerfile's default) ship Python 3.8 (r35) or 3.10
      # (r36); edgetrain needs 3.11, so the base must be chosen, not defaulted.
      [[ -n "${TRAINER_BASE:-}" ]] || die "trainer: set TRAINER_BASE to an arm64 image with" \
        "Python >= 3.11 and a Jetson build of torch (L4T PyTorch images have Python 3.8/3.10);" \
        "SKIP_IMAGES=trainer leaves it out"
      can_run_arm64 || die "trainer: this $(uname -m) host cannot run arm64 programs (no" \
        "qemu-aarch64 binfmt handler in /proc/sys/fs/binfmt_misc); register qemu-user-static" \
        "or build on an arm64 machine; SKIP_IMAGES=trainer leaves it out"
      build trainer trainer-jetson.Dockerfile "$TRAINER_BASE" aarch64 "train jetson" ;;
    *) die "unknown image $image (operator, node-agent, estimator, trainer)" ;;
  esac
done
