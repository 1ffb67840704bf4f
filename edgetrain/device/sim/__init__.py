"""Jetson digital twin: a live sysfs tree driven by a physical time/power model (simulated)."""

from edgetrain.device.sim.boards import BOARDS, POWER_TARGETS_W, BoardSpec
from edgetrain.device.sim.control import (
    TwinState,
    TwinWorkload,
    read_state,
    read_workload,
    write_workload,
)
from edgetrain.device.sim.physics import (
    FullPowerMode,
    GroundTruth,
    PowerComponents,
    PowerMode,
    UnknownBoardError,
    count_power_modes,
    enumerate_power_modes,
    get_board,
    ground_truth,
    idle_power,
    max_power_mode,
)
from edgetrain.device.sim.twin import DeviceTwin, TracePoint

__all__ = [
    "BOARDS",
    "POWER_TARGETS_W",
    "BoardSpec",
    "DeviceTwin",
    "FullPowerMode",
    "GroundTruth",
    "PowerComponents",
    "PowerMode",
    "TracePoint",
    "TwinState",
    "TwinWorkload",
    "UnknownBoardError",
    "count_power_modes",
    "enumerate_power_modes",
    "get_board",
    "ground_truth",
    "idle_power",
    "max_power_mode",
    "read_state",
    "read_workload",
    "write_workload",
]
