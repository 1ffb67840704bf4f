"""Local Kubernetes for edgetrain: a real control plane built from Go modules, real nodes (a
kubelet with containerd and runc each: the server in the host's namespaces, realnode.py; the
Jetsons over device twins and the other servers in namespaces of their own, jetsons.py), and
kwok idle nodes."""

from __future__ import annotations

from edgetrain.cluster.binaries import K8S_VERSION, BinaryMissingError
from edgetrain.cluster.controlplane import LocalCluster
from edgetrain.cluster.nodes import VNodeSpec, node_specs
from edgetrain.cluster.process import ComponentError
from edgetrain.kube import KubeApiError, KubeClient, api_path

__all__ = [
    "K8S_VERSION",
    "BinaryMissingError",
    "ComponentError",
    "KubeApiError",
    "KubeClient",
    "LocalCluster",
    "VNodeSpec",
    "api_path",
    "node_specs",
]
