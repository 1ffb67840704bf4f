"""The configuration files of a real node (containerd, CNI, kubelet), for the server node on
the host (`realnode.py`) and the namespaced Jetson nodes (`nsnode.py`) alike. Pure: paths and
addresses in, file contents out. docs/cluster.md says why each setting is needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgetrain.cluster.hostnet import CNI_BIN_DIR
from edgetrain.cluster.images import PAUSE_IMAGE
from edgetrain.cluster.kubeconfig import write_kubeconfig
from edgetrain.cluster.pki import Pki, issue_client_pair, issue_serving_pair, write_atomic

KUBELET_PORT = 10250


def containerd_toml(*, root: Path, state: Path, socket: Path, opt: Path, runc: str,
                    runc_root: Path, cni_conf_dir: Path, nvidia: bool = False) -> str:
    """containerd 2.x: every path given, NRI off, the local pause image pinned, the CRI
    settings this host kind needs. `nvidia`: the same runtime also as handler `nvidia`, which
    K3s registers on a Jetson (its NVIDIA container runtime) and pods reach through the
    `nvidia` RuntimeClass; on a simulated Jetson that runtime already gives the twin."""
    handlers = ("runc", "nvidia") if nvidia else ("runc",)
    runtimes = "".join(f"""
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.{h}]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.{h}.options]
  BinaryName = "{runc}"
  Root = "{runc_root}"
  SystemdCgroup = false
""" for h in handlers)
    return f"""# Written by `edgetrain cluster up`: containerd of a real node of the cluster.
# docs/cluster.md says why each setting is needed.
version = 4
root = "{root}"
state = "{state}"
imports = []

[plugins."io.containerd.server.v1.grpc"]
  address = "{socket}"

[plugins."io.containerd.server.v1.ttrpc"]
  address = "{socket}.ttrpc"

[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_tls_streaming = false

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{PAUSE_IMAGE}"

[plugins."io.containerd.cri.v1.runtime"]
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
{runtimes}
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["{CNI_BIN_DIR}"]
  conf_dir = "{cni_conf_dir}"
  max_conf_num = 1
"""


def cni_conflist(*, name: str, bridge: str, subnet: str, gateway: str, ipam_dir: Path,
                 ) -> dict[str, Any]:
    """A bridge with host-local IPAM; no NAT, so no iptables rule."""
    return {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [{
            "type": "bridge",
            "bridge": bridge,
            "isGateway": True,
            "ipMasq": False,  # no NAT, no iptables: pods reach this machine only
            "hairpinMode": True,
            "ipam": {
                "type": "host-local",
                "dataDir": str(ipam_dir),
                "ranges": [[{"subnet": subnet, "gateway": gateway}]],
                "routes": [{"dst": "0.0.0.0/0"}],
            },
        }],
    }


def kubelet_config(*, address: str, tls_dir: Path, client_ca: Path, endpoint: str,
                   pod_logs_dir: Path, volume_plugin_dir: Path, cgroup_root: str | None = None,
                   ) -> dict[str, Any]:
    """KubeletConfiguration for cgroup v1 without systemd, no iptables, images never collected."""
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": address,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 0,
        "tlsCertFile": str(tls_dir / "kubelet.crt"),
        "tlsPrivateKeyFile": str(tls_dir / "kubelet.key"),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(client_ca)}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": endpoint,
        "imageServiceEndpoint": endpoint,
        # This host: cgroup v1 (hybrid), no systemd as PID 1.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        # Else a host-wide KUBE-FIREWALL DROP rule for non-loopback sources to 127/8.
        "makeIPTablesUtilChains": False,
        "podLogsDir": str(pod_logs_dir),
        "volumePluginDir": str(volume_plugin_dir),
        "staticPodPath": "",
        "resolvConf": "/etc/resolv.conf",
        # Images come from `cluster up`, never from a registry: garbage collection would
        # delete an image nothing can pull again; eviction thresholds suit a shared host.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "serializeImagePulls": False,
        "nodeStatusReportFrequency": "10s",
    }
    if cgroup_root is not None:
        # Several kubelets on one host: each manages its own subtree of every hierarchy.
        config["cgroupRoot"] = cgroup_root
    return config


def write_kubelet_identity(node_dir: Path, name: str, address: str, api_url: str,
                           pki: Pki) -> None:
    """A kubelet's serving and client certificates under `node_dir/pki` and its kubeconfig
    (`kubelet.kubeconfig`) as the node `name` at `address`."""
    pki_dir = node_dir / "pki"
    crt, key = issue_serving_pair(name, [address], pki)
    write_atomic(pki_dir / "kubelet.crt", crt, mode=0o644)
    write_atomic(pki_dir / "kubelet.key", key)
    ccrt, ckey = issue_client_pair(pki, f"system:node:{name}", "system:nodes")
    write_atomic(pki_dir / "kubelet-client.crt", ccrt, mode=0o644)
    write_atomic(pki_dir / "kubelet-client.key", ckey)
    write_kubeconfig(node_dir / "kubelet.kubeconfig", server=api_url, ca_crt=pki.ca_crt,
                     client_crt=pki_dir / "kubelet-client.crt",
                     client_key=pki_dir / "kubelet-client.key", user=f"system:node:{name}")
