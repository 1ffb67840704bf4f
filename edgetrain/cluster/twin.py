"""Device twins for virtual nodes: a factory makes a live sysfs tree for a board name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from edgetrain.device.sim import DeviceTwin
from edgetrain.workloads import workload_cost

# The twin polls its files for frequency writes from pod processes and rewrites the power
# files every tick; 10 Hz keeps several twins cheap on a 2-core machine.
VNODE_TWIN_TICK_S = 0.1


class Twin(Protocol):
    """A running device twin: `root` is what EDGETRAIN_SYSFS_ROOT points at."""

    @property
    def root(self) -> Path:
        """The fake filesystem root (holds sys/, etc/ as on the board)."""
        ...

    def close(self) -> None:
        """Stop animating the tree (the files stay)."""
        ...


# (board name, directory to build in) -> running twin
TwinFactory = Callable[[str, Path], Twin]


class SimTwin:
    """edgetrain.device.sim.DeviceTwin running in the agent process."""

    def __init__(self, board: str, directory: Path, tick_s: float = VNODE_TWIN_TICK_S) -> None:
        self.device = DeviceTwin(board, directory, tick_s=tick_s, cost_of=workload_cost).start()

    @property
    def root(self) -> Path:
        """The twin's filesystem root."""
        return self.device.root

    def close(self) -> None:
        """Stop the twin's update thread."""
        self.device.stop()


def default_twin_factory() -> TwinFactory:
    """The device layer's live twin (edgetrain.device.sim)."""
    return SimTwin
