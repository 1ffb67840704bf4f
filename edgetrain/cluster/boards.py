"""Node profiles of virtual Jetson boards and the virtual GPU server: labels and capacity."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from edgetrain.api.keys import (
    ANNOTATION_GPU_FREQUENCIES_HZ,
    ANNOTATION_SIMULATED,
    GPU_RESOURCE,
    LABEL_DEVICE_MODEL,
    LABEL_JETPACK,
    LABEL_L4T,
    LABEL_NODE_KIND,
    LABEL_VIRTUAL,
)
from edgetrain.device.sim.boards import BOARDS

NodeKind = Literal["jetson", "server"]


@dataclass(frozen=True)
class NodeProfile:
    """What a node running edgetrain's node agent reports about itself."""

    board: str  # device-model label value, also the device-twin board name
    kind: NodeKind
    arch: str  # kubernetes.io/arch
    cpu: str
    memory: str
    l4t: str | None
    jetpack: str | None
    os_image: str
    kernel: str
    gpu_freqs_hz: tuple[int, ...] = ()
    gpus: int = 1  # nvidia.com/gpu; the server has several so parallel estimate Jobs all fit

    @property
    def os_image_text(self) -> str:
        """nodeInfo.osImage: the Ubuntu release each L4T major ships with."""
        if self.os_image:
            return self.os_image
        ubuntu = {"32": "18.04", "34": "20.04", "35": "20.04", "36": "22.04"}
        major = (self.l4t or "").split(".")[0]
        return f"Ubuntu {ubuntu.get(major, '')} (L4T R{self.l4t}, simulated)"

    def labels(self, node_name: str, bare: bool = False) -> dict[str, str]:
        """Node labels (well-known ones plus edgetrain's). `bare`: only what a fresh K3s node's
        kubelet sets (hostname, os, arch); edgetrain's then come from its node agent."""
        out = {
            "kubernetes.io/hostname": node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": self.arch,
        }
        if bare:
            return out
        out |= {
            "node.kubernetes.io/instance-type": self.board,
            LABEL_DEVICE_MODEL: self.board,
            LABEL_NODE_KIND: self.kind,
            LABEL_VIRTUAL: "true",
        }
        if self.l4t:
            out[LABEL_L4T] = self.l4t
        if self.jetpack:
            out[LABEL_JETPACK] = self.jetpack
        return out

    def annotations(self, bare: bool = False) -> dict[str, str]:
        """Node annotations: GPU frequency table (not on a bare node: its agent sets it), and
        the honesty marker."""
        out = {ANNOTATION_SIMULATED: "true"}
        if self.gpu_freqs_hz and not bare:
            out[ANNOTATION_GPU_FREQUENCIES_HZ] = ",".join(str(f) for f in self.gpu_freqs_hz)
        return out

    def capacity(self) -> dict[str, str]:
        """status.capacity (allocatable is the same: nothing is reserved on a virtual node)."""
        return {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": "110",
            "ephemeral-storage": "64Gi",
            GPU_RESOURCE: str(self.gpus),
        }


def _mhz(*values: float) -> tuple[int, ...]:
    return tuple(round(v * 1_000_000) for v in values)


# Memory sizes are public devkit specs; L4T, JetPack, kernel, CPU count and GPU table are
# taken from the device twin's boards (edgetrain.device.sim.boards) when it knows the board.
_PROFILES: tuple[NodeProfile, ...] = (
    NodeProfile(
        board="jetson-nano", kind="jetson", arch="arm64", cpu="4", memory="4Gi",
        l4t="32.7.1", jetpack="4.6.1", os_image="",
        kernel="4.9.253-tegra",
        gpu_freqs_hz=_mhz(76.8, 153.6, 230.4, 307.2, 384, 460.8, 537.6, 614.4, 691.2, 768,
                          844.8, 921.6),
    ),
    NodeProfile(
        board="jetson-orin-nano", kind="jetson", arch="arm64", cpu="6", memory="8Gi",
        l4t="36.4.3", jetpack="6.2", os_image="",
        kernel="5.15.148-tegra",
        gpu_freqs_hz=_mhz(306, 408, 510, 612, 714, 816, 918, 1020),
    ),
    NodeProfile(
        board="jetson-agx-orin", kind="jetson", arch="arm64", cpu="12", memory="64Gi",
        l4t="36.4.3", jetpack="6.2", os_image="",
        kernel="5.15.148-tegra",
    ),
    NodeProfile(
        board="jetson-xavier-nx", kind="jetson", arch="arm64", cpu="6", memory="8Gi",
        l4t="32.7.1", jetpack="4.6.1", os_image="",
        kernel="4.9.253-tegra",
        gpu_freqs_hz=_mhz(114.75, 204, 306, 408, 510, 599.25, 701.25, 752.25, 803.25, 854.25,
                          905.25, 956.25, 1007.25, 1058.25, 1109.25),
    ),
    NodeProfile(
        board="jetson-agx-xavier", kind="jetson", arch="arm64", cpu="8", memory="32Gi",
        l4t="32.7.1", jetpack="4.6.1", os_image="",
        kernel="4.9.253-tegra",
    ),
    NodeProfile(
        board="jetson-tx2-nx", kind="jetson", arch="arm64", cpu="6", memory="4Gi",
        l4t="32.7.1", jetpack="4.6.1", os_image="",
        kernel="4.9.253-tegra",
    ),
    NodeProfile(
        board="gpu-server", kind="server", arch="amd64", cpu="16", memory="64Gi",
        l4t=None, jetpack=None, os_image="Ubuntu 22.04 (virtual GPU server, simulated)",
        kernel="6.1.0", gpus=8,
    ),
)
PROFILES: dict[str, NodeProfile] = {p.board: p for p in _PROFILES}
ALIASES = {
    "nano": "jetson-nano",
    "orin": "jetson-orin-nano",
    "orin-nano": "jetson-orin-nano",
    "agx-orin": "jetson-agx-orin",
    "agx": "jetson-agx-orin",
    "xavier-nx": "jetson-xavier-nx",
    "agx-xavier": "jetson-agx-xavier",
    "tx2-nx": "jetson-tx2-nx",
    "server": "gpu-server",
}


def _from_twin_boards(profile: NodeProfile) -> NodeProfile:
    """Prefer the device twin's board table for the facts it has, so labels match the twin."""
    spec = BOARDS.get(profile.board)
    if spec is None:
        return profile
    m = re.search(r"R(\d+) \(release\), REVISION: (\d+)\.(\d+)", spec.l4t_release)
    l4t = f"{m.group(1)}.{m.group(2)}.{m.group(3)}" if m else profile.l4t
    return replace(profile, l4t=l4t, jetpack=spec.jetpack, kernel=spec.kernel_release,
                   gpu_freqs_hz=tuple(spec.gpu_freqs_hz), cpu=str(spec.cpu_cores))


# A board's CPU core as QEMU's user-mode emulator names the closest model it has (7.2, Debian
# 12): an emulated Jetson's containers then see its core's ISA, not QEMU's `max` (ARMv9 with
# SVE, which a Nano lacks and whose emulation made the README job's training 1.4x slower).
QEMU_CPU_MODELS = {
    "cortex-a57": "cortex-a57",
    "carmel": "cortex-a76",  # ARMv8.2 both; QEMU has no Carmel
    "cortex-a78ae": "cortex-a76",  # ARMv8.2 both; QEMU 7.2 has no A78
}


def qemu_cpu(board: str) -> str | None:
    """QEMU's CPU model for an emulated board's containers (None: a board the twin lacks)."""
    spec = BOARDS.get(ALIASES.get(board, board))
    return None if spec is None else QEMU_CPU_MODELS.get(spec.cpu_core)


def profile(name: str) -> NodeProfile:
    """Profile for a board name or alias (nano, orin, agx-orin, xavier-nx, server)."""
    board = ALIASES.get(name, name)
    if board not in PROFILES:
        known = ", ".join(sorted({*ALIASES, *PROFILES}))
        raise ValueError(f"unknown board {name!r}; known: {known}")
    return _from_twin_boards(PROFILES[board])


def parse_counts(spec: str) -> dict[str, int]:
    """'nano=2,orin=1' -> {'jetson-nano': 2, 'jetson-orin-nano': 1} (board names resolved)."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, count = part.partition("=")
        if not sep or not count.strip().isdigit():
            raise ValueError(f"bad node count {part!r}: expected BOARD=N, e.g. nano=2")
        board = profile(name.strip()).board
        out[board] = out.get(board, 0) + int(count)
    return out
