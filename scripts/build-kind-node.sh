#!/usr/bin/env bash
# Build (or verify) what kind needs on a host with podman and no container registry
# (docs/kind.md, "Running it without a registry"); tests/cluster/test_kind.py uses it:
#   kind                                <- go install sigs.k8s.io/kind@KIND_VERSION
#   kubeadm, kube-proxy                 <- hack/kind (hack/k8s's module graph plus their imports)
#   localhost/edgetrain-kind/node:K8S   <- kind's images/base files (from the kind module) on a
#                                          bookworm root made with mmdebstrap; containerd, ctr,
#                                          crictl, kubelet, pause from build-node.sh; kubectl
#                                          ($KUBECTL, the virtualenv's); the control-plane
#                                          images made here from the same static binaries and
#                                          imported, pinned, into the node's containerd
# kindest/node cannot be pulled here, and kind's own `build node-image` fetches what it lacks
# from registries; this follows its flow with podman instead (a container from the base, the
# binaries copied in, the images imported with `ctr --no-unpack`, a commit).
# Not built: coredns and kindnetd (no registry, and kindnetd is not on the Go proxy): the test
# skips kubeadm's coredns addon and installs a ptp CNI config itself (disableDefaultCNI).
# Also installs (root + apt) mmdebstrap and, for podman's CNI network backend, the dnsname
# plugin: kind joins workers by the control-plane container's name.
# Idempotent: a warm run compares a manifest and the node image's label, and exits at once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD_DIR="$ROOT/hack/kind"
KIND_VERSION="v0.33.0"
CACHE="${EDGETRAIN_CACHE_DIR:-$HOME/.cache/edgetrain}"
OUT="$CACHE/kind"
REPO="localhost/edgetrain-kind"   # localhost/: podman never tries to pull these
APT_PACKAGES=(mmdebstrap golang-github-containernetworking-plugin-dnsname)
# Bump when this script changes what it produces.
BUILD_REV=1
# Loaded instead of /etc/containers/containers.conf (runc, no default ulimits; images/).
export CONTAINERS_CONF="${CONTAINERS_CONF:-$ROOT/images/containers.conf}"
export PATH="/usr/local/go/bin:$PATH"
export GOTOOLCHAIN=local CGO_ENABLED=0

log() { echo "build-kind-node: $*"; }
die() { echo "build-kind-node: $*" >&2; exit 1; }

as_root() {
  if [[ "$(id -u)" == 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"
  else return 1; fi
}

command -v podman >/dev/null || die "podman is not installed (make container-engine)"
missing=()
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
[[ -x /usr/lib/cni/dnsname ]] || missing+=(golang-github-containernetworking-plugin-dnsname)
if ((${#missing[@]})); then
  command -v apt-get >/dev/null && as_root true 2>/dev/null \
    || die "missing ${missing[*]} and cannot install them here (needs root and apt)"
  log "installing ${missing[*]} with apt"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install \
    -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# kind bind-mounts the host's /lib/modules into every node (read-only); a host without loadable
# modules (this machine kind) has no such folder, and the node container would not start.
[[ -d /lib/modules ]] || as_root mkdir -p /lib/modules \
  || die "/lib/modules is missing and cannot be made (needs root): kind's nodes mount it"

GO="$(bash "$ROOT/scripts/build-k8s.sh" --print-go-path)"
K8S_VERSION="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$ROOT/hack/k8s/go.mod")"
K8S_MINOR="$(echo "$K8S_VERSION" | cut -d. -f2)"
# hack/kind must pin every module exactly as hack/k8s does (it only adds): else the node would
# run other code than the control plane this project tests.
drift="$(awk 'NR == FNR { if ($2 ~ /^v/) want[$1] = $2; next }
              ($1 in want) && $2 ~ /^v/ && $2 != want[$1] { print $1 " " want[$1] " != " $2 }' \
         "$ROOT/hack/k8s/go.mod" "$MOD_DIR/go.mod")"
[[ -z "$drift" ]] || die "hack/kind/go.mod differs from hack/k8s/go.mod (redo it as its header says): $drift"
grep -q "k8s.io/kubernetes $K8S_VERSION" "$MOD_DIR/go.mod" \
  || die "hack/kind/go.mod lacks k8s.io/kubernetes $K8S_VERSION (redo it as its header says)"

BIN_DIR="${EDGETRAIN_BIN_DIR:-$CACHE/bin/$K8S_VERSION}"
NODE_BINS=(kube-apiserver kube-controller-manager kube-scheduler etcd kubelet containerd
           containerd-shim-runc-v2 ctr crictl pause)
for b in "${NODE_BINS[@]}"; do
  [[ -x "$BIN_DIR/$b" ]] || die "$BIN_DIR/$b is missing: run \`make cluster-bins\` first"
done
KUBECTL="${KUBECTL:-$(command -v kubectl || true)}"
[[ -x "$KUBECTL" ]] || die "no kubectl (set KUBECTL; \`make setup\` puts one in .venv/bin)"

NODE_IMAGE="$REPO/node:$K8S_VERSION"
GO_VERSION="$("$GO" env GOVERSION)"
SRC_HASH="$(cat "${BASH_SOURCE[0]}" "$ROOT/scripts/k8s-ldflags.sh" "$MOD_DIR"/go.mod "$MOD_DIR"/go.sum "$MOD_DIR"/*.Containerfile \
  "$BIN_DIR/manifest.txt" "$BIN_DIR/node-manifest.txt" "$KUBECTL" | sha256sum | cut -c1-16)"
MANIFEST_WANT="kind=${KIND_VERSION} k8s=${K8S_VERSION} go=${GO_VERSION} src=${SRC_HASH} rev=${BUILD_REV}"
LABEL="io.edgetrain.kind-node"

image_label() {
  podman image inspect --format "{{index .Labels \"$LABEL\"}}" "$NODE_IMAGE" 2>/dev/null || true
}
up_to_date() {
  [[ -f "$OUT/manifest.txt" && "$(cat "$OUT/manifest.txt")" == "$MANIFEST_WANT" ]] || return 1
  local b
  for b in kind kubeadm kube-proxy; do [[ -x "$OUT/$b" ]] || return 1; done
  [[ "$(image_label)" == "$MANIFEST_WANT" ]]
}

if up_to_date; then
  log "up to date: $OUT/kind, $NODE_IMAGE ($MANIFEST_WANT)"
  exit 0
fi
mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9
if up_to_date; then
  log "up to date (built by a concurrent run)"
  exit 0
fi

START_S=$SECONDS
WORK="$(mktemp -d "$OUT/.work.XXXXXX")"
BUILDER="edgetrain-kind-build-$$"
TAG="build-$$"
cleanup() {
  podman rm -f "$BUILDER" >/dev/null 2>&1 || true
  local i
  for i in base-rootfs proxy-rootfs base kube-apiserver kube-controller-manager kube-scheduler \
           etcd pause kube-proxy; do
    podman rmi -f "$REPO/$i:$TAG" >/dev/null 2>&1 || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
step() { log "[$((SECONDS - START_S)) s] $*"; }

step "go install sigs.k8s.io/kind@${KIND_VERSION}"
GOBIN="$WORK" "$GO" install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@${KIND_VERSION}" \
  || die "FAILED: go install kind"
KIND_SRC="$("$GO" env GOMODCACHE)/sigs.k8s.io/kind@${KIND_VERSION}/images/base/files"
[[ -f "$KIND_SRC/usr/local/bin/entrypoint" ]] || die "kind's images/base/files not in $KIND_SRC"

step "compiling kubeadm and kube-proxy ${K8S_VERSION} (hack/kind; warm Go cache: ~1.5 min)"
# shellcheck source=scripts/k8s-ldflags.sh
source "$ROOT/scripts/k8s-ldflags.sh"
LDFLAGS="$(k8s_ldflags "$K8S_VERSION" "$K8S_MINOR")"
(cd "$MOD_DIR" && "$GO" build -mod=readonly -trimpath -ldflags "$LDFLAGS" -o "$WORK/" \
  k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kube-proxy) || die "FAILED: kubeadm, kube-proxy"
version="$("$WORK/kubeadm" version -o short)"
[[ "$version" == "$K8S_VERSION" ]] || die "FAILED: kubeadm version is '$version'"

SOURCES=/etc/apt/sources.list.d/debian.sources
[[ -f "$SOURCES" ]] || SOURCES=/etc/apt/sources.list
mmdebstrap_tar() {  # out.tar packages: a bookworm root file system without docs
  mmdebstrap --quiet --variant=minbase --include="$2" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' bookworm "$1" "$SOURCES"
}
# The packages of kind's images/base, less those for network storage and rootless nodes.
step "mmdebstrap: the node's bookworm root (systemd 252: still runs on cgroup v1)"
mmdebstrap_tar "$WORK/base.tar" systemd,systemd-sysv,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,runc,containernetworking-plugins \
  || die "FAILED: mmdebstrap (node root)"
step "mmdebstrap: kube-proxy's root (nftables, iptables, conntrack)"
mmdebstrap_tar "$WORK/proxy.tar" iptables,nftables,conntrack || die "FAILED: mmdebstrap (kube-proxy root)"
podman import -q "$WORK/base.tar" "$REPO/base-rootfs:$TAG" >/dev/null
podman import -q "$WORK/proxy.tar" "$REPO/proxy-rootfs:$TAG" >/dev/null
rm -f "$WORK/base.tar" "$WORK/proxy.tar"

step "base image (kind's images/base files; containerd, ctr, crictl from build-node.sh)"
mkdir -p "$WORK/base/bin"
cp -r "$KIND_SRC" "$WORK/base/files"
chmod -R u+w "$WORK/base/files"
cp "$BIN_DIR"/{containerd,containerd-shim-runc-v2,ctr,crictl} "$WORK/base/bin/"
podman build -q --network none --build-arg "ROOTFS=$REPO/base-rootfs:$TAG" \
  -f "$MOD_DIR/base.Containerfile" -t "$REPO/base:$TAG" "$WORK/base" >/dev/null \
  || die "FAILED: base image"

# The images kubeadm's static pods and addons name, and the sandbox image of kind's containerd
# config: each is imported under the exact reference the node will ask for.
mapfile -t WANTED < <("$WORK/kubeadm" config images list --kubernetes-version "$K8S_VERSION")
SANDBOX="$(sed -n 's/^ *sandbox_image *= *"\(.*\)"/\1/p' "$KIND_SRC/etc/containerd/config.toml")"
[[ -n "$SANDBOX" ]] || die "no sandbox_image in kind's containerd config.toml"
WANTED+=("$SANDBOX")
step "control-plane images: ${WANTED[*]}"
mkdir -p "$WORK/ctx" "$WORK/images"
declare -A REF_OF=()
for ref in "${WANTED[@]}"; do
  name="${ref##*/}"; name="${name%%:*}"
  case "$name" in
    kube-apiserver|kube-controller-manager|kube-scheduler|etcd)
      cp "$BIN_DIR/$name" "$WORK/ctx/"
      podman build -q --network none --build-arg "BIN=$name" -f "$MOD_DIR/component.Containerfile" \
        -t "$REPO/$name:$TAG" "$WORK/ctx" >/dev/null || die "FAILED: image $name" ;;
    kube-proxy)
      cp "$WORK/kube-proxy" "$WORK/ctx/"
      podman build -q --network none --build-arg "ROOTFS=$REPO/proxy-rootfs:$TAG" \
        -f "$MOD_DIR/kube-proxy.Containerfile" -t "$REPO/$name:$TAG" "$WORK/ctx" >/dev/null \
        || die "FAILED: image kube-proxy" ;;
    pause)
      cp "$BIN_DIR/pause" "$WORK/ctx/"
      podman build -q --network none -f "$MOD_DIR/pause.Containerfile" -t "$REPO/$name:$TAG" \
        "$WORK/ctx" >/dev/null || die "FAILED: image pause" ;;
    coredns) log "  $ref: not built (the test skips kubeadm's coredns addon)"; continue ;;
    *) die "kubeadm names an image this script does not make: $ref" ;;
  esac
  REF_OF[$ref]="$REPO/$name:$TAG"
  [[ -f "$WORK/images/$name.tar" ]] || podman save -q --format docker-archive \
    -o "$WORK/images/$name.tar" "$REPO/$name:$TAG"
done

step "node image $NODE_IMAGE"
podman run -d --name "$BUILDER" --network none --entrypoint sleep "$REPO/base:$TAG" infinity >/dev/null
podman cp "$WORK/kubeadm" "$BUILDER:/usr/bin/kubeadm"
podman cp "$BIN_DIR/kubelet" "$BUILDER:/usr/bin/kubelet"
podman cp "$KUBECTL" "$BUILDER:/usr/bin/kubectl"
podman cp "$WORK/images" "$BUILDER:/kind/images"
tags=""
for ref in "${!REF_OF[@]}"; do tags+="${REF_OF[$ref]}=$ref "; done
podman exec "$BUILDER" bash -c "
  set -euo pipefail
  chown root:root /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl
  chmod 755 /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl
  echo '$K8S_VERSION' > /kind/version
  containerd >/tmp/containerd.log 2>&1 &
  pid=\$!
  for i in \$(seq 1 40); do [[ -S /run/containerd/containerd.sock ]] && break; sleep 0.25; done
  ctr version >/dev/null
  for a in /kind/images/*.tar; do
    ctr -n k8s.io images import --label=io.cri-containerd.pinned=pinned --all-platforms \
      --no-unpack --digests \"\$a\" >/dev/null
  done
  for t in $tags; do ctr -n k8s.io images tag --force \"\${t%%=*}\" \"\${t#*=}\" >/dev/null; done
  # Keep only the references the node asks for (the import's own names go).
  ctr -n k8s.io images ls -q | grep -v '^registry.k8s.io/' | xargs -r ctr -n k8s.io images rm >/dev/null
  kill \$pid; wait \$pid || true
  rm -rf /kind/images /tmp/containerd.log /run/nri /run/containerd
" 2> >(grep -v 'DEPRECATION: The support for cgroup v1' >&2) || die "FAILED: importing the images"
podman commit -q --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' \
  --change 'ENV HTTP_PROXY="" HTTPS_PROXY="" NO_PROXY=""' \
  --change "LABEL $LABEL=\"$MANIFEST_WANT\"" "$BUILDER" "$NODE_IMAGE" >/dev/null
[[ "$(image_label)" == "$MANIFEST_WANT" ]] || die "FAILED: $NODE_IMAGE has no label $LABEL"

for b in kind kubeadm kube-proxy; do mv -f "$WORK/$b" "$OUT/$b"; done
printf '%s\n' "$MANIFEST_WANT" >"$OUT/manifest.txt.new"
mv -f "$OUT/manifest.txt.new" "$OUT/manifest.txt"
step "done: $OUT/kind ($("$OUT/kind" version)), $NODE_IMAGE" \
  "($(podman image inspect --format '{{.Size}}' "$NODE_IMAGE") bytes)"
