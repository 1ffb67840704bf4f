"""The named node specs of the local cluster: which boards, under which names (`cluster up`,
the tests' fleets)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from edgetrain.cluster.boards import NodeProfile, profile


@dataclass(frozen=True)
class VNodeSpec:
    """One node to run: its name and board."""

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
