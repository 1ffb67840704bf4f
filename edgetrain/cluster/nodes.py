"""What a node of the local cluster is, as the rest of `cluster/` sees it: the small interfaces
the two node implementations share (a virtual node, `node.py`, and a real kubelet with
containerd, `realnode.py`), the settings a virtual node's pods read from their agent, and the
named node specs. Imports point one way: interfaces here, implementations above."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from edgetrain.cluster.boards import NodeProfile, profile
from edgetrain.cluster.pki import Pki
from edgetrain.cluster.twin import TwinFactory
from edgetrain.kube import KubeClient

# containerRuntimeVersion of a virtual node: pods are local processes, no container runtime.
VNODE_RUNTIME = "edgetrain-vnode://0.1.0"


@runtime_checkable
class ClusterNode(Protocol):
    """One node of the local cluster, whatever runs its pods."""

    @property
    def name(self) -> str:
        """The Node's name."""
        ...

    @property
    def address(self) -> str:
        """The Node's InternalIP."""
        ...

    @property
    def runtime(self) -> str:
        """What runs its pods, as status.nodeInfo.containerRuntimeVersion says it."""
        ...

    def start(self) -> None:
        """Register the Node and start running its pods."""
        ...

    def stop(self) -> None:
        """Stop its pods and everything the node started."""
        ...


@dataclass(frozen=True)
class VNodeSpec:
    """One virtual node to run."""

    name: str
    profile: NodeProfile
    # Registered with only the kubelet's own labels (hostname, os, arch), as a fresh K3s node:
    # edgetrain's labels must then come from the chart's node agents. A server still reports
    # its nvidia.com/gpu capacity (on a real one, the NVIDIA device plugin's doing).
    bare: bool = False


def node_specs(counts: Mapping[str, int], servers: int = 0, prefix: str = "vnode",
               bare: bool = False) -> list[VNodeSpec]:
    """Named specs: <prefix>-<board>-<i> for each board count, <prefix>-gpu-server-<i> (no
    prefix: <board>-<i>, as the real nodes are named)."""
    out: list[VNodeSpec] = []
    head = f"{prefix}-" if prefix else ""
    for board, count in counts.items():
        prof = profile(board)
        out += [VNodeSpec(f"{head}{prof.board}-{i}", prof, bare) for i in range(count)]
    server = profile("server")
    out += [VNodeSpec(f"{head}{server.board}-{i}", server, bare) for i in range(servers)]
    return out


class AgentSettings(Protocol):
    """What virtual nodes share from the agent that runs them (VNodeAgent)."""

    @property
    def client(self) -> KubeClient: ...

    @property
    def work_dir(self) -> Path: ...

    @property
    def twin_factory(self) -> TwinFactory: ...

    @property
    def executables(self) -> dict[str, list[str]]: ...

    @property
    def restart_backoff_s(self) -> float: ...

    @property
    def max_backoff_s(self) -> float: ...

    @property
    def cluster_ca(self) -> Pki | None: ...

    @property
    def registry_reachable(self) -> bool: ...

    @property
    def preload_pods(self) -> bool: ...

    @property
    def stop_event(self) -> threading.Event: ...

    @property
    def finished(self) -> set[str]: ...

    @property
    def started_at(self) -> str: ...

    @property
    def boot_id(self) -> str: ...

    @property
    def api_host(self) -> str: ...

    @property
    def api_port(self) -> int: ...


class PodHost(Protocol):
    """The virtual node a pod runner runs on, as the runner sees it."""

    @property
    def name(self) -> str: ...

    @property
    def dir(self) -> Path: ...

    @property
    def address(self) -> str: ...

    @property
    def host_root(self) -> Path: ...

    @property
    def agent(self) -> AgentSettings: ...

    @property
    def spec(self) -> VNodeSpec: ...

    def forget(self, uid: str) -> None:
        """A runner ended."""
        ...
