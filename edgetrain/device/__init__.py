"""Device layer: GPU frequency control and power sampling on Jetson sysfs (or a twin tree)."""

from edgetrain.device.board import (
    BoardIdentity,
    DeviceInfo,
    ThermalZone,
    detect_board,
    read_device_info,
    read_thermal_zones,
)
from edgetrain.device.devfreq import FrequencyRange, GpuDevfreq
from edgetrain.device.errors import (
    DevfreqNotFoundError,
    DeviceError,
    FrequencyWriteError,
    PowerSensorNotFoundError,
    SensorReadError,
    UnsupportedFrequencyError,
)
from edgetrain.device.jtop_backend import JtopPowerSensor, jtop_available, select_power_sensor
from edgetrain.device.power import PowerReading, RailReading, SysfsPowerSensor
from edgetrain.device.sampler import PowerSample, PowerSampler, PowerStats, find_stable_time
from edgetrain.device.sysfs import ENV_SYSFS_ROOT, resolve_root

__all__ = [
    "ENV_SYSFS_ROOT",
    "BoardIdentity",
    "DevfreqNotFoundError",
    "DeviceError",
    "DeviceInfo",
    "FrequencyRange",
    "FrequencyWriteError",
    "GpuDevfreq",
    "JtopPowerSensor",
    "PowerReading",
    "PowerSample",
    "PowerSampler",
    "PowerSensorNotFoundError",
    "PowerStats",
    "RailReading",
    "SensorReadError",
    "SysfsPowerSensor",
    "ThermalZone",
    "UnsupportedFrequencyError",
    "detect_board",
    "find_stable_time",
    "jtop_available",
    "read_device_info",
    "read_thermal_zones",
    "resolve_root",
    "select_power_sensor",
]
