"""Optional jetson-stats backend: power through the jtop service when its socket is there.

Frequency control stays on sysfs: jtop has no API for an arbitrary GPU clock [R2]. The client
must match the service's major.minor version [R5]; install with the `jetson` extra.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import time
from typing import Any

from edgetrain.device.power import PowerReading, RailReading, SysfsPowerSensor, total_rule
from edgetrain.device.sysfs import resolve_root

JTOP_SOCKET = "run/jtop.sock"


def jtop_available(root: str | os.PathLike[str] | None = None) -> tuple[bool, str]:
    """Whether the jtop backend can be used, and why not if it cannot."""
    sock = resolve_root(root) / JTOP_SOCKET
    if not sock.exists():
        return False, f"{sock} does not exist (jtop.service not running or not mounted)"
    if importlib.util.find_spec("jtop") is None:
        return False, "the jtop package is not installed (pip install 'edgetrain[jetson]')"
    return True, f"{sock} exists and jtop is importable"


class JtopPowerSensor:
    """Power rails from a running jtop service (`j.power` [R1])."""

    backend = "jtop"

    def __init__(self, interval_s: float = 0.5) -> None:
        module: Any = importlib.import_module("jtop")
        self._jtop: Any = module.jtop(interval=interval_s)
        self._jtop.start()

    def close(self) -> None:
        """Disconnect from the service."""
        self._jtop.close()

    def read(self) -> PowerReading:
        """Rails and total as jtop reports them (tot: POM_5V_IN/VDD_IN, else the rail sum)."""
        now = time.monotonic()
        power: dict[str, Any] = self._jtop.power
        rails = [
            RailReading(
                name=name,
                power_mw=float(values.get("power", 0.0)),
                voltage_mv=_maybe_float(values.get("volt")),
                current_ma=_maybe_float(values.get("curr")),
            )
            for name, values in power.get("rail", {}).items()
        ]
        tot = power.get("tot", {})
        total_w = float(tot.get("power", sum(r.power_mw for r in rails))) / 1000.0
        rule = str(tot.get("name") or total_rule([r.name for r in rails]))
        return PowerReading(
            timestamp_s=now,
            rails=rails,
            total_power_w=total_w,
            total_rule=rule,
            backend=self.backend,
        )

    def read_total_w(self) -> float:
        """The total only."""
        return self.read().total_power_w


def _maybe_float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def select_power_sensor(
    root: str | os.PathLike[str] | None = None, prefer: str = "auto"
) -> SysfsPowerSensor | JtopPowerSensor:
    """jtop when `<root>/run/jtop.sock` exists and jtop imports (prefer='auto'), else sysfs."""
    if prefer not in ("auto", "sysfs", "jtop"):
        raise ValueError(f"prefer must be auto, sysfs or jtop, not {prefer!r}")
    if prefer != "sysfs":
        ok, why = jtop_available(root)
        if ok:
            return JtopPowerSensor()
        if prefer == "jtop":
            raise RuntimeError(f"jtop backend requested but unavailable: {why}")
    return SysfsPowerSensor.discover(root)


__all__ = ["JTOP_SOCKET", "JtopPowerSensor", "jtop_available", "select_power_sensor"]
