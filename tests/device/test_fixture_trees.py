"""Readers against trees copied from the documented real layouts (jetson-facts.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgetrain.device import (
    DevfreqNotFoundError,
    GpuDevfreq,
    PowerSensorNotFoundError,
    SysfsPowerSensor,
    detect_board,
    read_device_info,
    read_thermal_zones,
)
from tests.device.conftest import NANO_TABLE, ORIN_TABLE, XAVIER_NX_TABLE


def test_nano_iio_rails_total_is_pom_5v_in(nano_tree: Path) -> None:
    sensor = SysfsPowerSensor.discover(nano_tree)
    assert sensor.layout == "iio"
    reading = sensor.read()
    assert [r.name for r in reading.rails] == ["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"]
    assert reading.rails[0].power_mw == 933
    assert reading.rails[0].voltage_mv == 5072 and reading.rails[0].current_ma == 184
    # Do not add the GPU/CPU rails to the input rail [R1][R23 #51].
    assert reading.total_power_w == pytest.approx(0.933)
    assert reading.total_rule == "POM_5V_IN"
    assert sensor.read_total_w() == pytest.approx(0.933)


def test_nano_devfreq_board_and_thermal(nano_tree: Path) -> None:
    node = GpuDevfreq.discover(nano_tree)
    assert node.path.name == "57000000.gpu"
    assert node.available_frequencies_hz() == NANO_TABLE
    assert node.cur_freq_hz() == 76_800_000
    assert node.current_range().max_freq_hz == 921_600_000
    assert node.load_permille() == 312
    board = detect_board(nano_tree)
    assert board.model == "NVIDIA Jetson Nano Developer Kit"
    assert board.board_id == "jetson-nano"
    assert board.l4t == "32.7.1"
    assert board.soc == "tegra210"
    zones = {z.name: z.temp_c for z in read_thermal_zones(nano_tree)}
    assert zones == {"AO-therm": 33.5, "CPU-therm": 30.0, "GPU-therm": 29.5}


def test_xavier_nx_hwmon_skips_in7_and_computes_mw(xavier_nx_hwmon_tree: Path) -> None:
    sensor = SysfsPowerSensor.discover(xavier_nx_hwmon_tree)
    assert sensor.layout == "hwmon"
    reading = sensor.read()
    assert [r.name for r in reading.rails] == ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]
    assert reading.rails[0].power_mw == pytest.approx(5016 * 1200 / 1000)
    assert reading.total_rule == "VDD_IN"
    assert reading.total_power_w == pytest.approx(6.0192)


def test_xavier_nx_discovery_skips_non_gpu_devfreq(xavier_nx_hwmon_tree: Path) -> None:
    node = GpuDevfreq.discover(xavier_nx_hwmon_tree)
    assert node.path.name == "17000000.gv11b"
    assert node.available_frequencies_hz() == XAVIER_NX_TABLE
    assert node.cur_freq_hz() == 510_000_000
    info = read_device_info(xavier_nx_hwmon_tree)
    assert info.board.board_id == "jetson-xavier-nx" and info.board.l4t == "35.4.1"
    assert not info.simulated
    assert {z.name: z.temp_c for z in info.thermal} == {"cpu-thermal": 41.0, "tj-thermal": None}


def test_orin_two_chips_nc_and_sum_of_rails(orin_tree: Path) -> None:
    sensor = SysfsPowerSensor.discover(orin_tree)
    reading = sensor.read()
    names = [r.name for r in reading.rails]
    assert names == ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"]
    assert "NC" not in names
    assert reading.total_rule == "sum of rails"
    expected_mw = 19000 * 500 / 1000 + 19000 * 100 / 1000 + 5000 * 600 / 1000 + 5000 * 200 / 1000
    assert reading.total_power_w == pytest.approx(expected_mw / 1000)
    assert sensor.read_total_w() == pytest.approx(expected_mw / 1000)


def test_orin_jp6_devfreq_named_gpu(orin_tree: Path) -> None:
    node = GpuDevfreq.discover(orin_tree)
    assert node.available_frequencies_hz() == ORIN_TABLE
    board = detect_board(orin_tree)
    assert board.board_id == "jetson-agx-orin" and board.soc == "tegra234"
    assert board.l4t == "36.4.3"


def test_missing_nodes_give_actionable_errors(tmp_path: Path) -> None:
    with pytest.raises(DevfreqNotFoundError, match="railgate"):
        GpuDevfreq.discover(tmp_path)
    with pytest.raises(PowerSensorNotFoundError, match="EDGETRAIN_SYSFS_ROOT"):
        SysfsPowerSensor.discover(tmp_path)
    info = read_device_info(tmp_path)
    assert info.gpu is None and info.power is None and len(info.errors) == 2


def test_env_var_sets_the_root(nano_tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGETRAIN_SYSFS_ROOT", str(nano_tree))
    assert GpuDevfreq.discover().path.name == "57000000.gpu"
    assert SysfsPowerSensor.discover().read().total_power_w == pytest.approx(0.933)


def test_nano_in_an_unprivileged_container_finds_its_gpu_and_board(
        nano_tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """runc masks /sys/firmware (and so /proc/device-tree, a link into it) in every
    unprivileged container: the GPU is found by the OF_NAME its device's uevent carries, the
    board is the one the deployment names; where both are readable the devicetree wins."""
    import shutil

    (nano_tree / "sys/devices/gpu.0/uevent").write_text(
        "DRIVER=gpu-nvgpu\nOF_NAME=gpu\nOF_FULLNAME=/gpu@57000000\n")
    monkeypatch.setenv("EDGETRAIN_BOARD", "jetson-orin-nano")  # wrong on purpose: not read
    assert detect_board(nano_tree).board_id == "jetson-nano"
    shutil.rmtree(nano_tree / "sys/firmware")
    (nano_tree / "proc/device-tree").unlink(missing_ok=True)
    assert GpuDevfreq.discover(nano_tree).path.name == "57000000.gpu"
    assert detect_board(nano_tree).board_id == "jetson-orin-nano"
    monkeypatch.setenv("EDGETRAIN_BOARD", "jetson-nano")
    board = detect_board(nano_tree)
    assert (board.board_id, board.model, board.l4t) == ("jetson-nano", None, "32.7.1")
    (nano_tree / "sys/devices/gpu.0/uevent").write_text("DRIVER=gpu-nvgpu\n")
    with pytest.raises(DevfreqNotFoundError):
        GpuDevfreq.discover(nano_tree)
