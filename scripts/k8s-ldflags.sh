# Sourced by the scripts that build Kubernetes binaries (build-k8s.sh, build-node.sh,
# build-kind-node.sh): the linker flags that stamp exactly the module version, which /version,
# kubectl's skew checks, kubeadm and Helm's KubeVersion read.
k8s_ldflags() {  # version minor: the -ldflags value
  local pkg flags="-s -w" build_date
  build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X ${pkg}.gitVersion=$1 -X ${pkg}.gitMajor=1"
    flags+=" -X ${pkg}.gitMinor=$2 -X ${pkg}.gitTreeState=archive"
    flags+=" -X ${pkg}.gitCommit= -X ${pkg}.buildDate=${build_date}"
  done
  echo "$flags"
}
