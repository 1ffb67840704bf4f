"""Errors raised by the device layer; each message says what failed, where, and how to fix it."""

from __future__ import annotations


class DeviceError(RuntimeError):
    """Base class for device-layer errors."""


class DevfreqNotFoundError(DeviceError):
    """No GPU devfreq node under the sysfs root."""


class UnsupportedFrequencyError(DeviceError, ValueError):
    """A requested GPU frequency is not in the board's table."""


class FrequencyWriteError(DeviceError):
    """Writing min_freq/max_freq failed or did not take effect."""


class PowerSensorNotFoundError(DeviceError):
    """No INA3221 power monitor under the sysfs root."""


class SensorReadError(DeviceError):
    """A sensor file could not be read or parsed."""
