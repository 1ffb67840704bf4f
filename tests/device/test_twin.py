"""The twin's tree, its control file, noise, throttling and power modes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from edgetrain.device import GpuDevfreq, SysfsPowerSensor, detect_board, read_device_info
from edgetrain.device.sim import (
    BOARDS,
    DeviceTwin,
    FullPowerMode,
    PowerMode,
    TwinWorkload,
    read_state,
    write_workload,
)
from edgetrain.workloads import workload_cost


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_tree_layout_matches_the_board(board: str, tmp_path: Path) -> None:
    twin = DeviceTwin(board, tmp_path, noise_rel=0.0, cost_of=workload_cost).build()
    try:
        spec = twin.spec
        ident = detect_board(tmp_path)
        assert ident.board_id == board and ident.model == spec.devicetree_model
        assert ident.l4t is not None and ident.soc == spec.soc
        sensor = SysfsPowerSensor.discover(tmp_path)
        assert sensor.layout == ("iio" if spec.sensors[0].driver == "ina3221x" else "hwmon")
        expected = [c for s in spec.sensors for c in s.channels.values() if c != "NC"]
        assert sensor.rail_names() == expected
        assert sensor.rule == (spec.total_rail or "sum of rails")
        idle = sensor.read().total_power_w
        assert idle == pytest.approx(twin.trace()[-1].model_power_w, rel=0.01)
        info = read_device_info(tmp_path)
        assert info.simulated and not info.errors
        assert info.gpu is not None and info.gpu.devfreq_path.endswith(spec.devfreq_name)
        state = read_state(tmp_path)
        assert state is not None and state.simulated and state.board == board
        # The GPU's devicetree name where a container runtime masks /sys/firmware.
        uevent = (tmp_path / spec.gpu_device_dir / "uevent").read_text()
        assert f"OF_NAME={spec.gpu_of_node_name}\n" in uevent
    finally:
        twin.stop()


def test_workload_file_drives_power_from_another_writer(tmp_path: Path) -> None:
    twin = DeviceTwin(
        "jetson-orin-nano", tmp_path, noise_rel=0.0, power_settle_tau_s=0.0, cost_of=workload_cost
    ).build()
    try:
        sensor = SysfsPowerSensor.discover(tmp_path)
        idle = sensor.read_total_w()
        # What a trainer in another process does: rewrite the JSON control file.
        write_workload(tmp_path, TwinWorkload(model="resnet18", batch_size=128, busy=True))
        os.utime(tmp_path / "run/edgetrain-twin/workload.json", ns=(1, time.time_ns()))
        point = twin.tick()
        assert point.phase == "gpu-busy"
        gt = twin.ground_truth(128, twin.spec.gpu_fmax_hz)
        assert sensor.read_total_w() == pytest.approx(gt.peak_power_w, rel=0.01)
        assert sensor.read_total_w() > 3 * idle
        node = GpuDevfreq.discover(tmp_path)
        assert node.load_permille() == round(1000 * gt.gpu_busy_s / gt.time_per_batch_s)
        twin.set_idle()
        assert sensor.read_total_w() == pytest.approx(idle, rel=0.01)
    finally:
        twin.stop()


def test_noise_is_seeded_and_reproducible(tmp_path: Path) -> None:
    def run(seed: int, where: Path) -> list[float]:
        twin = DeviceTwin(
            "jetson-nano", where, noise_rel=0.02, seed=seed, cost_of=workload_cost
        ).build()
        try:
            return [twin.tick(now=100.0 + i * 0.01).total_power_w for i in range(20)]
        finally:
            twin.stop()

    a, b, c = run(3, tmp_path / "a"), run(3, tmp_path / "b"), run(4, tmp_path / "c")
    assert a == b and a != c


def test_thermal_throttling_lowers_cur_freq_not_max(tmp_path: Path) -> None:
    twin = DeviceTwin(
        "jetson-nano",
        tmp_path,
        noise_rel=0.0,
        thermal_throttle=True,
        throttle_c=40.0,
        thermal_tau_s=0.5,
        power_settle_tau_s=0.0,
        cost_of=workload_cost,
    ).build()
    try:
        twin.set_workload("resnet18", 128)
        t0 = time.monotonic()
        for i in range(1, 200):
            twin.tick(now=t0 + i * 0.05)  # 10 simulated seconds, deterministic
        node = GpuDevfreq.discover(tmp_path)
        assert node.max_freq_hz() == 921_600_000
        assert node.cur_freq_hz() < 921_600_000
        state = read_state(tmp_path)
        assert state is not None and state.throttle_steps > 0
        assert twin.gpu_temp_c > 35.0
    finally:
        twin.stop()


def test_power_mode_files_feed_the_model(tmp_path: Path) -> None:
    twin = DeviceTwin(
        "jetson-agx-orin", tmp_path, noise_rel=0.0, power_settle_tau_s=0.0, cost_of=workload_cost
    ).build()
    try:
        spec = twin.spec
        twin.set_workload("resnet18", 32)
        full = SysfsPowerSensor.discover(tmp_path).read_total_w()
        mode = FullPowerMode(
            cpu_cores=4,
            cpu_freq_hz=sorted(spec.cpu_freqs_hz)[10],
            emc_freq_hz=min(spec.emc_freqs_hz),
            gpu_freq_hz=624_750_000,
        )
        twin.set_power_mode(mode)
        assert twin.current_mode() == PowerMode(
            cpu_cores=4, cpu_freq_hz=mode.cpu_freq_hz, emc_freq_hz=mode.emc_freq_hz
        )
        assert GpuDevfreq.discover(tmp_path).cur_freq_hz() == 624_750_000
        assert (tmp_path / "sys/devices/system/cpu/cpu5/online").read_text().strip() == "0"
        assert SysfsPowerSensor.discover(tmp_path).read_total_w() < full
        with pytest.raises(ValueError, match="not in the board"):
            twin.set_power_mode(PowerMode(cpu_cores=4, cpu_freq_hz=1, emc_freq_hz=1))
    finally:
        twin.stop()
