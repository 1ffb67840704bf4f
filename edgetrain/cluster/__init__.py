"""Local Kubernetes for edgetrain: a real control plane built from Go modules, a real server
node (kubelet + containerd, realnode.py) where the host can run one, virtual Jetson nodes that
run pods as local processes over a device twin, and kwok idle nodes."""

from __future__ import annotations

from edgetrain.cluster.binaries import K8S_VERSION, BinaryMissingError
from edgetrain.cluster.controlplane import LocalCluster
from edgetrain.cluster.nodes import VNodeSpec, node_specs
from edgetrain.cluster.pod_status import container_log
from edgetrain.cluster.process import ComponentError
from edgetrain.cluster.vnode import VNodeAgent
from edgetrain.kube import KubeApiError, KubeClient, api_path

__all__ = [
    "K8S_VERSION",
    "BinaryMissingError",
    "ComponentError",
    "KubeApiError",
    "KubeClient",
    "LocalCluster",
    "VNodeAgent",
    "VNodeSpec",
    "api_path",
    "container_log",
    "node_specs",
]
