"""Backend selection: jtop only when its socket exists and the package imports."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from edgetrain.device import JtopPowerSensor, SysfsPowerSensor, jtop_available, select_power_sensor


class _FakeJtop:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.power: dict[str, Any] = {
            "rail": {
                "VDD_IN": {"volt": 5000, "curr": 1000, "power": 5000},
                "VDD_SOC": {"volt": 5000, "curr": 200, "power": 1000},
            },
            "tot": {"power": 5000, "name": "VDD_IN"},
        }

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_socket_absent_uses_sysfs(nano_tree: Path) -> None:
    ok, why = jtop_available(nano_tree)
    assert not ok and "jtop.sock" in why
    assert isinstance(select_power_sensor(nano_tree), SysfsPowerSensor)


def test_socket_present_without_package_uses_sysfs(
    nano_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (nano_tree / "run").mkdir(exist_ok=True)
    (nano_tree / "run/jtop.sock").touch()
    monkeypatch.setitem(sys.modules, "jtop", None)  # make `import jtop` fail
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    ok, why = jtop_available(nano_tree)
    assert not ok and "not installed" in why
    assert isinstance(select_power_sensor(nano_tree), SysfsPowerSensor)
    with pytest.raises(RuntimeError, match="unavailable"):
        select_power_sensor(nano_tree, prefer="jtop")


def test_socket_and_package_use_jtop(nano_tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (nano_tree / "run").mkdir(exist_ok=True)
    (nano_tree / "run/jtop.sock").touch()
    fake = types.ModuleType("jtop")
    fake.jtop = _FakeJtop  # type: ignore[attr-defined]
    fake.__spec__ = types.SimpleNamespace(name="jtop")  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "jtop", fake)
    sensor = select_power_sensor(nano_tree)
    assert isinstance(sensor, JtopPowerSensor)
    reading = sensor.read()
    assert reading.backend == "jtop" and reading.total_rule == "VDD_IN"
    assert reading.total_power_w == pytest.approx(5.0)
    assert [r.name for r in reading.rails] == ["VDD_IN", "VDD_SOC"]
    assert isinstance(select_power_sensor(nano_tree, prefer="sysfs"), SysfsPowerSensor)
