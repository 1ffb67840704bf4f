"""The simulated GPUs of the local cluster's real server nodes, advertised as the extended
resource `nvidia.com/gpu`, as Kubernetes documents for a node without a device plugin
("Advertise Extended Resources for a Node"): a patch of the Node's status capacity once the
kubelet has registered it. The kubelet keeps a capacity it does not manage and copies it into
allocatable on each status update; it zeroes such resources only when it re-registers over an
existing Node without its device-manager checkpoint (a wiped node directory), and `cluster up`
always starts its nodes fresh. No GPU exists behind it: the estimate pods that request one run
on the CPU (the `estimator-cpu` image)."""

from __future__ import annotations

from edgetrain.api.keys import GPU_RESOURCE
from edgetrain.kube import KubeClient, Obj, api_path


def advertised_gpus(node: Obj) -> int:
    """`nvidia.com/gpu` in a Node's allocatable (0 where absent)."""
    value = ((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, "0")
    return int(str(value))


def advertise_gpus(client: KubeClient, node_name: str, count: int,
                   timeout_s: float = 60.0) -> None:
    """Give the Node `count` simulated GPUs (capacity and allocatable) and wait until the
    API server shows them allocatable."""
    path = api_path("v1", "nodes", name=node_name)
    quantity = str(count)
    client.patch(f"{path}/status", {"status": {"capacity": {GPU_RESOURCE: quantity},
                                               "allocatable": {GPU_RESOURCE: quantity}}},
                 "merge")
    client.wait_for(path, lambda n: advertised_gpus(n) == count, timeout_s=timeout_s,
                    what=f"{node_name} advertising {count} {GPU_RESOURCE}")
