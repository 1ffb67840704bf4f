#!/usr/bin/env bash
# Build edgetrain's container images with podman or Docker; `make images`, `make images-core`,
# `make container-engine` and tests/images call this script, so the tests walk the user's path.
#
#   scripts/build-images.sh --engine-only          install podman (root + apt) if no engine
#   scripts/build-images.sh --emulation-only       register arm64 emulation (qemu + binfmt_misc)
#   scripts/build-images.sh --base-only ARCH ...   make the local Debian base of each ARCH
#   scripts/build-images.sh [IMAGE ...]            IMAGE: operator node-agent estimator trainer
#                                                  trainer-cpu (default: operator node-agent)
# Images and architectures:
#   operator, node-agent  one tag, a manifest list of linux/amd64 and linux/arm64 (ARCHES): the
#                         GPU server and the Jetsons pull the same reference
#   estimator             linux/amd64 (the GPU server's CUDA torch)
#   trainer               linux/arm64 on a JetPack base (TRAINER_BASE; images/README.md)
#   trainer-cpu           linux/arm64 on the local Debian base with PyPI's aarch64 CPU torch:
#                         the trainer's entry points under emulation, no CUDA
# Environment:
#   CONTAINER_ENGINE  podman | docker. Default: podman if installed, else a running Docker,
#                     else podman installed with apt (root only).
#   REGISTRY, TAG     tags are $REGISTRY/<image>:$TAG (default localhost/edgetrain, the version
#                     in pyproject.toml). Per-architecture images are $TAG-amd64, $TAG-arm64.
#   ARCHES            architectures of operator and node-agent (default "amd64 arm64").
#   PUSH              1: push what was built (manifest lists with every architecture).
#   BASE              base of operator, node-agent, estimator, trainer-cpu. Default: a Debian
#                     bookworm base per architecture, made here with mmdebstrap (no registry);
#                     set e.g. BASE=python:3.11-slim-bookworm to use the official image instead.
#   PACKAGE_BASE      base of the stage that builds the package's wheel, run on this host's
#                     architecture (Python 3.11). Default: BASE, else this host's Debian base.
#   ESTIMATOR_BASE    default: $BASE (PyPI's x86-64 torch wheel brings the CUDA libraries).
#   TRAINER_BASE      default: the Dockerfile's JetPack 6 base (images/README.md).
#   PIP_OPTIONS       pip options inside the build. Default with podman: the wheel cache below
#                     (--no-index --find-links /wheels); with Docker: PyPI.
# Prints "built <ref> <bytes> <seconds> <arch>" per image and "manifest <ref> <arch,...>" per list.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${EDGETRAIN_CACHE_DIR:-$HOME/.cache/edgetrain}"
PYTHON="${PYTHON:-python3}"
# Loaded instead of /etc/containers/containers.conf: the host's files are never edited.
export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/images/containers.conf}"
REGISTRY="${REGISTRY:-localhost/edgetrain}"
TAG="${TAG:-$(awk -F'"' '$1 ~ /^version *= */ {print $2; exit}' "$ROOT/pyproject.toml")}"
read -r -a ARCH_LIST <<<"${ARCHES:-amd64 arm64}"
# The last PyPI torch for aarch64 without CUDA: later aarch64 wheels are CUDA 13 (SBSA) builds
# that need several GB of NVIDIA libraries. trainer-cpu pins it; nothing else does.
CPU_TORCH_AARCH64="torch==2.9.1"

# Bump when the base's package list or excludes change (the cached tar is keyed by it).
BASE_REV=5
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

machine_of() {  # amd64|arm64 -> x86_64|aarch64 (wheel platform tags, uname -m)
  case "$1" in amd64) echo x86_64 ;; arm64) echo aarch64 ;; *) die "unknown architecture $1" ;; esac
}

host_arch() {
  case "$(uname -m)" in x86_64) echo amd64 ;; aarch64) echo arm64 ;; *) uname -m ;; esac
}

# Foreign architectures run through QEMU user-mode emulation registered with binfmt_misc. The F
# flag (Debian's qemu-user-static sets it) keeps the interpreter open, so it also works inside
# containers and mmdebstrap chroots. Prints one line saying why when it cannot be set up.
EMULATION_WHY=""
binfmt_ok() {  # arch
  local entry="/proc/sys/fs/binfmt_misc/qemu-$(machine_of "$1")" state
  state="$(cat "$entry" 2>/dev/null || true)"
  [[ "$state" == enabled* && "$state" == *"flags: "*F* ]]
}
ensure_emulation() {  # arch
  local arch="$1" machine
  machine="$(machine_of "$arch")"
  [[ "$arch" == "$(host_arch)" ]] && return 0
  binfmt_ok "$arch" && return 0
  if [[ ! -x "/usr/bin/qemu-$machine-static" ]] || ! command -v update-binfmts >/dev/null; then
    if ! apt_install qemu-user-static binfmt-support; then
      EMULATION_WHY="cannot install qemu-user-static and binfmt-support (needs root and apt)"
      return 1
    fi
  fi
  if ! mountpoint -q /proc/sys/fs/binfmt_misc 2>/dev/null; then
    as_root mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || {
      EMULATION_WHY="cannot mount binfmt_misc at /proc/sys/fs/binfmt_misc (needs root outside a container)"
      return 1; }
  fi
  # No systemd here to do it at boot: register the handler by hand (idempotent).
  as_root update-binfmts --enable "qemu-$machine" >/dev/null 2>&1 || true
  if ! binfmt_ok "$arch"; then
    EMULATION_WHY="qemu-$machine is not registered with binfmt_misc with the F flag: $(cat \
      "/proc/sys/fs/binfmt_misc/qemu-$machine" 2>/dev/null | head -2 | tr '\n' ' ' || echo missing)"
    return 1
  fi
  log "arm64 emulation: qemu-$machine registered with binfmt_misc (flags F)"
}
require_emulation() {  # arch
  ensure_emulation "$1" || die "$1: this $(uname -m) host cannot run $1 programs: $EMULATION_WHY;" \
    "build on a $1 machine, or leave $1 out (ARCHES=$(host_arch), SKIP_IMAGES=trainer)"
}

image_exists() { "$ENGINE" image inspect "$1" >/dev/null 2>&1; }

# A Debian bookworm base with python3 (+venv) per architecture, made from Debian's packages: no
# registry needed. Sets LOCAL_BASE.
make_local_base() {  # arch
  local arch="$1"
  LOCAL_BASE="localhost/debian-py:bookworm-r$BASE_REV-$arch"
  image_exists "$LOCAL_BASE" && return
  local tar="$CACHE/images/debian-py-bookworm-r$BASE_REV-$arch.tar"
  if [[ ! -f "$tar" ]]; then
    command -v mmdebstrap >/dev/null || apt_install mmdebstrap \
      || die "mmdebstrap is needed for the local base (or set BASE=python:3.11-slim-bookworm)"
    if [[ "$arch" != "$(host_arch)" ]]; then
      command -v arch-test >/dev/null || apt_install arch-test \
        || die "arch-test is needed for mmdebstrap --arch=$arch"
      require_emulation "$arch"
    fi
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
    log "making the $arch Debian base with mmdebstrap (one to a few minutes)"
    # essential (not minbase): no apt in the image, nothing installs packages at run time.
    # gconv: glibc's iconv modules (9 MB); Python's codecs do not use them.
    # usrmerge brings full perl (47 MB) for a one-off conversion: purged once the tree is
    # made, with usr-is-merged standing in for it in init-system-helpers' dependency.
    # Root mode mounts /proc, /sys and /dev in its chroot under $TMPDIR and unmounts them as
    # it exits, but not when killed: a build killed by a timeout left them mounted, where a
    # later `rm -rf` of /tmp reaches the host's /dev. In a mount namespace of its own they
    # end with it, however it ends.
    unshare --mount --propagation private -- \
    mmdebstrap --quiet --arch="$arch" --format=tar --variant=essential \
      --include=python3,python3-venv,ca-certificates,libstdc++6,usr-is-merged \
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
  "$ENGINE" import --arch "$arch" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' "$tar" "$LOCAL_BASE" >/dev/null
}

base_for() {  # arch [explicit base]: prints the base image for that architecture
  if [[ -n "${2:-}" ]]; then echo "$2"; return; fi
  make_local_base "$1"
  echo "$LOCAL_BASE"
}

# Wheels for the images' dependencies, downloaded once per pyproject.toml and architecture
# (cp311 manylinux, the Debian base's Python).
wheel_dir() {  # machine (x86_64|aarch64), extras ("" or "train"), extra requirement ("" or pin)
  local machine="$1" extras="$2" pin="${3:-}"
  local key
  key="$(cat "$ROOT/pyproject.toml" "$ROOT/images/requirements.py" | sha256sum | cut -c1-16)"
  local dir="$CACHE/wheels/$key-cp311-$machine${extras:+-${extras// /-}}${pin:+-${pin//[=<>]/}}"
  if [[ ! -f "$dir/.complete" ]]; then
    "$PYTHON" -m pip --version >/dev/null 2>&1 \
      || die "$PYTHON has no pip for the wheel cache: set PYTHON (e.g. .venv/bin/python)"
    local platforms=() i
    for i in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${i}_$machine"); done
    platforms+=(--platform "manylinux2014_$machine")
    log "downloading wheels into $dir"
    rm -rf "$dir" && mkdir -p "$dir"
    "$PYTHON" "$ROOT/images/requirements.py" "$ROOT/pyproject.toml" $extras >"$dir/requirements.txt"
    if [[ -n "$pin" ]]; then
      # The pinned wheel alone, then its dependencies with markers evaluated for $machine
      # (pip download evaluates them on the host: aarch64 torch would bring x86's CUDA list).
      "$PYTHON" -m pip download --quiet --dest "$dir" --only-binary=:all: --no-deps \
        --python-version 3.11 --implementation cp --abi cp311 "${platforms[@]}" "$pin"
      local name="${pin%%[=<>!~ ]*}" wheels
      wheels=("$dir/$name"-*.whl)
      local wheel="${wheels[0]}"
      sed -i "/^$name\([<>=!~ ;]\|\$\)/d" "$dir/requirements.txt"
      "$PYTHON" "$ROOT/images/requirements.py" --wheel-deps "$wheel" "$machine" \
        >>"$dir/requirements.txt"
    fi
    # setuptools and wheel: the package stage builds the wheel from /wheels too.
    "$PYTHON" -m pip download --quiet --dest "$dir" --only-binary=:all: \
      --python-version 3.11 --implementation cp --abi cp311 "${platforms[@]}" \
      -r "$dir/requirements.txt" "setuptools>=68" wheel
    touch "$dir/.complete"
  fi
  echo "$dir"
}

# A build whose inputs are those of the image's last build is skipped: podman 4 takes 8 s to
# find every layer of one in its cache (it hashes the context for each COPY), Docker about 1 s.
# The inputs: the engine, the build's arguments (bases by image ID, the wheel cache by key), the
# Dockerfile and the files of the context that .dockerignore lets in.
inputs_digest() {  # dockerfile build-args...
  local file="$1" arg id
  shift
  {
    echo "$ENGINE"
    for arg in "$@"; do
      echo "$arg"
      if [[ "$arg" == *BASE=?* ]]; then
        id="$("$ENGINE" image inspect --format '{{.Id}}' "${arg#*BASE=}" 2>/dev/null)" || id=-
        echo "$id"
      fi
    done
    cat "$ROOT/images/$file"
    (cd "$ROOT" && find pyproject.toml README.md images/requirements.py edgetrain -type f \
       ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
  } | sha256sum | cut -c1-32
}

stamp_of() { echo "$CACHE/images/built/${1//[\/:]/_}"; }

up_to_date() {  # ref digest: the stamp of the image's last build names these inputs and this image
  local stamp id
  stamp="$(stamp_of "$1")"
  [[ -f "$stamp" ]] || return 1
  id="$("$ENGINE" image inspect --format '{{.Id}}' "$1" 2>/dev/null)" || return 1
  [[ "$(cat "$stamp")" == "$2 $id" ]]
}

build() {  # ref dockerfile base arch extras [pin]
  local ref="$1" file="$2" base="$3" arch="$4" extras="$5" pin="${6:-}"
  local args=() opts="${PIP_OPTIONS-}"
  args+=(--network host -f "$ROOT/images/$file" -t "$ref" --platform "linux/$arch")
  [[ -n "$base" ]] && args+=(--build-arg "BASE=$base")
  # The pure-Python package is built in a stage of this host's own architecture (no emulation).
  args+=(--build-arg "PACKAGE_BASE=$(base_for "$(host_arch)" "${PACKAGE_BASE:-${BASE:-}}")")
  # BuildKit sets these itself; podman 4 does not.
  [[ "$ENGINE" == podman ]] && args+=(--build-arg "BUILDPLATFORM=linux/$(host_arch)"
                                      --build-arg "TARGETPLATFORM=linux/$arch")
  [[ -n "$pin" ]] && args+=(--build-arg "TORCH=$pin")
  if [[ "$ENGINE" == podman ]]; then
    # Build-time mounts only: the pip settings and certificates never enter a layer.
    [[ -f /etc/pip.conf ]] && args+=(-v /etc/pip.conf:/etc/pip.conf:ro)
    [[ -d /etc/ssl/certs ]] && args+=(-v /etc/ssl/certs:/etc/ssl/certs:ro)
    if [[ -z "${PIP_OPTIONS+set}" ]]; then
      args+=(-v "$(wheel_dir "$(machine_of "$arch")" "$extras" "$pin"):/wheels:ro")
      opts="--no-index --find-links /wheels"
    fi
  elif [[ "${PUSH:-}" == 1 ]]; then
    args+=(--push)
  else
    args+=(--load)  # buildx: into the local store
  fi
  args+=(--build-arg "PIP_OPTIONS=$opts")
  [[ "$arch" != "$(host_arch)" ]] && require_emulation "$arch"
  local start=$SECONDS digest size=-
  digest="$(inputs_digest "$file" "${args[@]}")"
  if [[ "${PUSH:-}" != 1 ]] && up_to_date "$ref" "$digest"; then
    log "$ref is up to date (built from these inputs: $digest)"
    echo "built $ref $("$ENGINE" image inspect --format '{{.Size}}' "$ref") 0 $arch"
    return
  fi
  log "$ENGINE build $ref (linux/$arch)"
  if [[ "$ENGINE" == docker ]]; then
    docker buildx build "${args[@]}" "$ROOT" >&2
  else
    "$ENGINE" build "${args[@]}" "$ROOT" >&2
  fi
  # pushed by buildx: not in the local store, so no size and no stamp
  if image_exists "$ref"; then
    size="$("$ENGINE" image inspect --format '{{.Size}}' "$ref")"
    mkdir -p "$(dirname "$(stamp_of "$ref")")"
    echo "$digest $("$ENGINE" image inspect --format '{{.Id}}' "$ref")" >"$(stamp_of "$ref").tmp"
    mv "$(stamp_of "$ref").tmp" "$(stamp_of "$ref")"
  fi
  echo "built $ref $size $((SECONDS - start)) $arch"
}

list_holds() {  # ref arch...: the manifest list REF is the images REF-ARCH, one per ARCH
  local ref="$1" arch want=() have
  shift
  "$ENGINE" manifest exists "$ref" 2>/dev/null || return 1
  for arch in "$@"; do
    want+=("$("$ENGINE" image inspect --format '{{.Digest}}' "$ref-$arch" 2>/dev/null) $arch")
  done
  have="$("$ENGINE" manifest inspect "$ref" 2>/dev/null | "$PYTHON" -c 'import json, sys
print("\n".join(sorted(m["digest"] + " " + m["platform"]["architecture"]
                       for m in json.load(sys.stdin)["manifests"])))')" || return 1
  [[ "$have" == "$(printf '%s\n' "${want[@]}" | LC_ALL=C sort)" ]]
}

# One tag for every architecture: a manifest list of the per-architecture images.
publish_list() {  # ref arch...
  local ref="$1"; shift
  local arch
  if [[ "$ENGINE" == docker ]]; then
    # Docker's classic store holds no lists: buildx builds and pushes one in a single step.
    if [[ "${PUSH:-}" == 1 ]]; then
      local platforms
      platforms="$(printf 'linux/%s,' "$@")"
      docker buildx build --push --platform "${platforms%,}" "${LIST_ARGS[@]}" -t "$ref" "$ROOT" >&2
    else
      log "docker: $ref per architecture only ($ref-<arch>); PUSH=1 publishes the list"
      return
    fi
  else
    # A list of exactly these images is kept (and pushed again with PUSH=1).
    if list_holds "$ref" "$@"; then
      [[ "${PUSH:-}" == 1 ]] && "$ENGINE" manifest push --all "$ref" "docker://$ref" >&2
      echo "manifest $ref $(IFS=,; echo "$*")"
      return
    fi
    # Replace whatever holds the tag now (an earlier list, or a single-arch image of old).
    if "$ENGINE" manifest exists "$ref" 2>/dev/null; then "$ENGINE" manifest rm "$ref" >/dev/null
    elif image_exists "$ref"; then "$ENGINE" rmi "$ref" >/dev/null; fi
    "$ENGINE" manifest create "$ref" >/dev/null
    for arch in "$@"; do
      "$ENGINE" manifest add --arch "$arch" "$ref" "containers-storage:$ref-$arch" >/dev/null
    done
    if [[ "${PUSH:-}" == 1 ]]; then
      "$ENGINE" manifest push --all "$ref" "docker://$ref" >&2
    fi
  fi
  echo "manifest $ref $(IFS=,; echo "$*")"
}

push_one() {  # ref
  [[ "${PUSH:-}" == 1 && "$ENGINE" == podman ]] && "$ENGINE" push "$1" "docker://$1" >&2
  return 0
}

multi_arch() {  # name dockerfile
  local name="$1" file="$2" ref="$REGISTRY/$1:$TAG" arch
  for arch in "${ARCH_LIST[@]}"; do
    [[ "$arch" != "$(host_arch)" ]] && require_emulation "$arch"
  done
  LIST_ARGS=(-f "$ROOT/images/$file" --build-arg "BASE=${BASE:-}")
  if [[ "$ENGINE" == docker && "${PUSH:-}" == 1 ]]; then
    publish_list "$ref" "${ARCH_LIST[@]}"  # one buildx build for every architecture
    return
  fi
  for arch in "${ARCH_LIST[@]}"; do
    build "$ref-$arch" "$file" "$(base_for "$arch" "${BASE:-}")" "$arch" ""
  done
  publish_list "$ref" "${ARCH_LIST[@]}"
}

pick_engine
# Docker builds for users with a registry: the official base, PyPI (no local base, no wheel cache).
[[ "$ENGINE" == docker && -z "${BASE:-}" ]] && BASE=python:3.11-slim-bookworm
[[ "${1:-}" == "--engine-only" ]] && { log "engine: $ENGINE"; exit 0; }
if [[ "${1:-}" == "--base-only" ]]; then
  [[ $# -ge 2 ]] || die "--base-only needs one or more architectures, e.g. --base-only amd64 arm64"
  for arch in "${@:2}"; do make_local_base "$arch"; log "base: $LOCAL_BASE"; done
  exit 0
fi
if [[ "${1:-}" == "--emulation-only" ]]; then
  require_emulation arm64
  log "emulation: arm64 programs run on this $(uname -m) host"
  exit 0
fi
# One build at a time per image store: two builds that publish the same manifest list at once
# (two test workers, two checkouts) leave a list whose instance manifest is missing, and then
# every `podman images` fails until the list is removed.
if [[ "$ENGINE" == podman ]]; then
  BUILD_LOCK="${EDGETRAIN_BUILD_LOCK:-/run/edgetrain-build-images.lock}"
  exec {lock_fd}>>"$BUILD_LOCK"
  flock "$lock_fd"
fi
IMAGES=("$@")
[[ ${#IMAGES[@]} -gt 0 ]] || IMAGES=(operator node-agent)

for image in "${IMAGES[@]}"; do
  case "$image" in
    operator) multi_arch operator operator.Dockerfile ;;
    node-agent) multi_arch node-agent node-agent.Dockerfile ;;
    estimator)
      ref="$REGISTRY/estimator:$TAG"
      build "$ref" estimator-cuda.Dockerfile "$(base_for amd64 "${ESTIMATOR_BASE:-${BASE:-}}")" \
        amd64 train
      push_one "$ref" ;;
    trainer)
      # The Dockerfile's default base is a JetPack image (NVIDIA's registry); an explicit
      # TRAINER_BASE picks another L4T release (images/README.md).
      ref="$REGISTRY/trainer:$TAG"
      require_emulation arm64
      # pip from PyPI, not the cp311 wheel cache: JetPack's Python is 3.10 (6) or 3.12 (7).
      PIP_OPTIONS="${PIP_OPTIONS-}" build "$ref" trainer-jetson.Dockerfile "${TRAINER_BASE:-}" \
        arm64 train
      push_one "$ref" ;;
    trainer-cpu)
      # The same Dockerfile on the local Debian base: no CUDA, for emulation tests and CPU boards.
      ref="$REGISTRY/trainer-cpu:$TAG"
      require_emulation arm64
      build "$ref" trainer-jetson.Dockerfile "$(base_for arm64 "${BASE:-}")" arm64 train \
        "$CPU_TORCH_AARCH64"
      push_one "$ref" ;;
    *) die "unknown image $image (operator, node-agent, estimator, trainer, trainer-cpu)" ;;
  esac
done
