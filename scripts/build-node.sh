#!/usr/bin/env bash
# Build (or verify) what a real server node of `edgetrain cluster up` runs, next to the
# control-plane binaries (docs/cluster.md, "A real server node"):
#   kubelet                               <- hack/k8s (the control plane's own module graph)
#   containerd, containerd-shim-runc-v2,  <- go install github.com/containerd/containerd/v2
#   ctr
#   crictl                                <- go install sigs.k8s.io/cri-tools (cleanup on down)
#   pause                                 <- hack/pause (the sandbox image, built here)
#   runc, CNI plugins (/usr/lib/cni)      <- Debian packages, installed with apt when missing
# Idempotent: a warm run compares node-manifest.txt and exits at once. Needs the Go toolchain
# build-k8s.sh picks (run `make cluster-bins`, which runs both).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD_DIR="$ROOT/hack/k8s"
CONTAINERD_VERSION="v2.4.2"
CRICTL_VERSION="v1.37.0"
APT_PACKAGES=(runc containernetworking-plugins)
CNI_DIR=/usr/lib/cni
# Bump when this script changes what it produces.
BUILD_REV=1

export PATH="/usr/local/go/bin:$PATH"
export GOTOOLCHAIN=local CGO_ENABLED=0
GO="$(bash "$ROOT/scripts/build-k8s.sh" --print-go-path)"
K8S_VERSION="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$MOD_DIR/go.mod")"
K8S_MINOR="$(echo "$K8S_VERSION" | cut -d. -f2)"
BIN_DIR="${EDGETRAIN_BIN_DIR:-${HOME}/.cache/edgetrain/bin/${K8S_VERSION}}"
BINARIES=(kubelet containerd containerd-shim-runc-v2 ctr crictl pause)

log() { echo "build-node: $*"; }

as_root() {
  if [[ "$(id -u)" == 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"
  else return 1; fi
}

# runc and the CNI plugins from Debian: installed here (root + apt) when missing. Without them
# `cluster up` says why in one line and keeps its server nodes virtual.
if ! command -v runc >/dev/null || [[ ! -x "$CNI_DIR/bridge" ]]; then
  if command -v apt-get >/dev/null && as_root true 2>/dev/null; then
    log "installing ${APT_PACKAGES[*]} with apt"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install \
      -y -qq --no-install-recommends "${APT_PACKAGES[@]}" >/dev/null
  else
    log "runc or the CNI plugins are missing and cannot be installed here (not root, or no" \
      "apt): cluster up will keep server nodes virtual"
  fi
fi

GO_VERSION="$("$GO" env GOVERSION)"
SUM_HASH="$(cat "$MOD_DIR/go.mod" "$MOD_DIR/go.sum" "$ROOT/hack/pause/go.mod" \
  "$ROOT/hack/pause/main.go" | sha256sum | cut -c1-16)"
MANIFEST_WANT="kubelet=${K8S_VERSION} containerd=${CONTAINERD_VERSION} crictl=${CRICTL_VERSION} go=${GO_VERSION} mod=${SUM_HASH} rev=${BUILD_REV}"

up_to_date() {
  [[ -f "$BIN_DIR/node-manifest.txt" ]] || return 1
  [[ "$(cat "$BIN_DIR/node-manifest.txt")" == "$MANIFEST_WANT" ]] || return 1
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN_DIR/$b" ]] || return 1; done
}

if up_to_date; then
  log "up to date in $BIN_DIR ($MANIFEST_WANT)"
  exit 0
fi
mkdir -p "$BIN_DIR"
exec 9>"$BIN_DIR/.node-lock"
flock 9
if up_to_date; then
  log "up to date in $BIN_DIR (built by a concurrent run)"
  exit 0
fi

START_S=$SECONDS
STAGE="$(mktemp -d "$BIN_DIR/.node-stage.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT

# shellcheck source=scripts/k8s-ldflags.sh
source "$ROOT/scripts/k8s-ldflags.sh"
LDFLAGS="$(k8s_ldflags "$K8S_VERSION" "$K8S_MINOR")"

log "compiling kubelet ${K8S_VERSION} (warm Go cache from build-k8s.sh: ~25 s)"
(cd "$MOD_DIR" && "$GO" build -mod=readonly -trimpath -ldflags "$LDFLAGS" -o "$STAGE/kubelet" \
  k8s.io/kubernetes/cmd/kubelet) || { log "FAILED: kubelet"; exit 1; }

log "go install containerd ${CONTAINERD_VERSION} (~1 min cold)"
GOBIN="$STAGE" GOFLAGS=-trimpath "$GO" install -ldflags "-s -w \
  -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}" \
  -tags "no_btrfs no_devmapper no_zfs" \
  "github.com/containerd/containerd/v2/cmd/containerd@${CONTAINERD_VERSION}" \
  "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@${CONTAINERD_VERSION}" \
  "github.com/containerd/containerd/v2/cmd/ctr@${CONTAINERD_VERSION}" \
  || { log "FAILED: containerd"; exit 1; }

log "go install crictl ${CRICTL_VERSION}"
GOBIN="$STAGE" GOFLAGS=-trimpath "$GO" install -ldflags "-s -w \
  -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION}" \
  "sigs.k8s.io/cri-tools/cmd/crictl@${CRICTL_VERSION}" || { log "FAILED: crictl"; exit 1; }

log "compiling pause (hack/pause)"
(cd "$ROOT/hack/pause" && "$GO" build -trimpath -ldflags "-s -w" -o "$STAGE/pause" .) \
  || { log "FAILED: pause"; exit 1; }

# Capture, then match: a pipe into grep -q under pipefail fails when grep exits first.
kubelet_version="$("$STAGE/kubelet" --version)" || kubelet_version="(kubelet did not run)"
[[ "$kubelet_version" == "Kubernetes ${K8S_VERSION}" ]] \
  || { log "FAILED: kubelet --version is '$kubelet_version'"; exit 1; }
containerd_version="$("$STAGE/containerd" --version)" || containerd_version="(did not run)"
[[ "$containerd_version" == *"${CONTAINERD_VERSION}"* ]] \
  || { log "FAILED: containerd --version is '$containerd_version'"; exit 1; }

for b in "${BINARIES[@]}"; do mv -f "$STAGE/$b" "$BIN_DIR/$b"; done
printf '%s\n' "$MANIFEST_WANT" >"$STAGE/node-manifest.txt"
mv -f "$STAGE/node-manifest.txt" "$BIN_DIR/node-manifest.txt"
log "done in $((SECONDS - START_S)) s: $(cd "$BIN_DIR" && du -ch "${BINARIES[@]}" | tail -1 | cut -f1)"
