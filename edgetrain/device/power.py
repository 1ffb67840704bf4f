"""INA3221 power rails in both sysfs layouts, and the board's total-power rule.

- IIO, L4T <= 32 (`ina3221x`): `rail_name_N`, `in_power{N}_input` (mW), `in_voltage{N}_input`
  (mV), `in_current{N}_input` (mA); channels 0-based.
- hwmon, L4T >= 34 (`ina3221`): `inN_label`, `inN_input` (mV), `currN_input` (mA); channels
  1-3; no power file, so mW = mV * mA / 1000; `NC` labels and the in7 sum-of-shunts channel
  are skipped [R1][R12][R14]. The hwmonX index differs per board, so it is globbed [R13][R17].
Total: POM_5V_IN (Nano), else VDD_IN, else the sum of the rails [R1][R12].
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from edgetrain.device.errors import PowerSensorNotFoundError, SensorReadError
from edgetrain.device.sysfs import read_int, read_text, resolve_root

IIO_DRIVER_DIR = "sys/bus/i2c/drivers/ina3221x"
HWMON_DRIVER_DIR = "sys/bus/i2c/drivers/ina3221"
TOTAL_RAIL_PRIORITY = ("POM_5V_IN", "VDD_IN")
#: hwmon channel 7 is the summation of the shunt voltages, not a rail [R1][R14]
HWMON_SUM_CHANNEL = 7


class RailReading(BaseModel):
    """One rail at one instant."""

    model_config = ConfigDict(frozen=True)

    name: str
    power_mw: float
    voltage_mv: float | None = None
    current_ma: float | None = None


class PowerReading(BaseModel):
    """All rails and the board total at one instant (timestamp: time.monotonic())."""

    model_config = ConfigDict(frozen=True)

    timestamp_s: float
    rails: list[RailReading]
    total_power_w: float
    total_rule: str  # the rail used as total, or "sum of rails"
    backend: str


class PowerSource(Protocol):
    """Anything the sampler can poll for the board's total power."""

    def read(self) -> PowerReading:
        """One reading of every rail and the total."""
        ...

    def read_total_w(self) -> float:
        """The total only (the sampler's fast path)."""
        ...


@dataclass(frozen=True)
class Ina3221Channel:
    """Where one rail's files live."""

    name: str
    layout: Literal["iio", "hwmon"]
    device_dir: Path
    channel: int

    def read(self) -> RailReading:
        """Read this rail's power (and voltage/current where available)."""
        d, n = self.device_dir, self.channel
        try:
            if self.layout == "iio":
                power = float(read_int(d / f"in_power{n}_input"))
                volt = _optional_int(d / f"in_voltage{n}_input")
                curr = _optional_int(d / f"in_current{n}_input")
                return RailReading(name=self.name, power_mw=power, voltage_mv=volt, current_ma=curr)
            volt_mv = float(read_int(d / f"in{n}_input"))
            curr_ma = float(read_int(d / f"curr{n}_input"))
        except (OSError, ValueError, IndexError) as exc:
            raise SensorReadError(
                f"cannot read INA3221 rail {self.name} (channel {n}) in {d}: {exc}; some images "
                "need `chmod +r` on curr*_input (jetson-facts §4.7)"
            ) from exc
        return RailReading(
            name=self.name,
            power_mw=volt_mv * curr_ma / 1000.0,
            voltage_mv=volt_mv,
            current_ma=curr_ma,
        )


def _optional_int(path: Path) -> float | None:
    try:
        return float(read_int(path))
    except (OSError, ValueError, IndexError):
        return None


def _iio_channels(root: Path) -> list[Ina3221Channel]:
    channels: list[Ina3221Channel] = []
    for name_file in sorted(root.glob(f"{IIO_DRIVER_DIR}/*/iio:device*/rail_name_*")):
        match = re.fullmatch(r"rail_name_(\d+)", name_file.name)
        if not match:
            continue
        label = read_text(name_file)
        if label and label != "NC":
            channels.append(Ina3221Channel(label, "iio", name_file.parent, int(match.group(1))))
    return channels


def _hwmon_channels(root: Path) -> list[Ina3221Channel]:
    channels: list[Ina3221Channel] = []
    for label_file in sorted(root.glob(f"{HWMON_DRIVER_DIR}/*/hwmon/hwmon*/in*_label")):
        match = re.fullmatch(r"in(\d+)_label", label_file.name)
        if not match:
            continue
        n = int(match.group(1))
        label = read_text(label_file)
        if n == HWMON_SUM_CHANNEL or not label or label == "NC":
            continue
        if not (label_file.parent / f"curr{n}_input").exists():
            continue  # shunt-voltage-only channels have no current: not a rail
        channels.append(Ina3221Channel(label, "hwmon", label_file.parent, n))
    return channels


def total_rule(rail_names: list[str]) -> str:
    """Which rail is the board total: POM_5V_IN, else VDD_IN, else the sum of rails."""
    for name in TOTAL_RAIL_PRIORITY:
        if name in rail_names:
            return name
    return "sum of rails"


def total_power_w(rails: list[RailReading]) -> tuple[float, str]:
    """Board total in W and the rule used, from one set of rail readings."""
    rule = total_rule([r.name for r in rails])
    if rule == "sum of rails":
        return sum(r.power_mw for r in rails) / 1000.0, rule
    return next(r.power_mw for r in rails if r.name == rule) / 1000.0, rule


class SysfsPowerSensor:
    """INA3221 rails read straight from sysfs (either layout)."""

    backend = "sysfs"

    def __init__(self, channels: list[Ina3221Channel]) -> None:
        if not channels:
            raise ValueError("SysfsPowerSensor needs at least one channel")
        self.channels = channels
        self.rule = total_rule([c.name for c in channels])
        self._total_channels = (
            channels
            if self.rule == "sum of rails"
            else [c for c in channels if c.name == self.rule]
        )

    @classmethod
    def discover(cls, root: str | os.PathLike[str] | None = None) -> SysfsPowerSensor:
        """Find the INA3221 rails under the sysfs root (IIO first, then hwmon)."""
        base = resolve_root(root)
        channels = _iio_channels(base) or _hwmon_channels(base)
        if not channels:
            raise PowerSensorNotFoundError(
                f"no INA3221 rails under {base / IIO_DRIVER_DIR} or {base / HWMON_DRIVER_DIR}; "
                "the Jetson Nano 2GB has no INA3221; in a container bind-mount /sys (read-only "
                "is enough), or set EDGETRAIN_SYSFS_ROOT to a twin tree"
            )
        return cls(channels)

    @property
    def layout(self) -> str:
        """'iio' or 'hwmon'."""
        return self.channels[0].layout

    def rail_names(self) -> list[str]:
        """Rails in discovery order."""
        return [c.name for c in self.channels]

    def read(self) -> PowerReading:
        """Every rail plus the total."""
        now = time.monotonic()
        rails = [c.read() for c in self.channels]
        total, rule = total_power_w(rails)
        return PowerReading(
            timestamp_s=now,
            rails=rails,
            total_power_w=total,
            total_rule=rule,
            backend=f"{self.backend}:{self.layout}",
        )

    def read_total_w(self) -> float:
        """Only the files needed for the total (one rail, or all for sum-of-rails boards)."""
        return sum(c.read().power_mw for c in self._total_channels) / 1000.0
