"""Pin/restore on every twin model, the table check, and the 4.9-kernel write ordering."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgetrain.device import (
    FrequencyRange,
    GpuDevfreq,
    SysfsPowerSensor,
    UnsupportedFrequencyError,
)
from edgetrain.device.sim import BOARDS, DeviceTwin, read_state
from edgetrain.device.sim.twin import DEVFREQ_REPAIR_S
from edgetrain.device.sysfs import write_value
from edgetrain.workloads import workload_cost


@pytest.fixture(params=sorted(BOARDS))
def twin(request: pytest.FixtureRequest, tmp_path: Path) -> DeviceTwin:
    t = DeviceTwin(
        request.param, tmp_path / request.param, noise_rel=0.0, cost_of=workload_cost
    ).build()
    yield t
    t.stop()


def test_pin_restore_round_trip_every_board(twin: DeviceTwin) -> None:
    node = GpuDevfreq.discover(twin.root)
    table = node.available_frequencies_hz()
    assert table == sorted(twin.spec.gpu_freqs_hz)
    original = node.current_range()
    assert original == FrequencyRange(min_freq_hz=table[0], max_freq_hz=table[-1])
    # low -> high -> middle -> low exercises both write directions
    for freq in (table[0], table[-1], table[len(table) // 2], table[1]):
        node.pin(freq)
        assert node.current_range() == FrequencyRange(min_freq_hz=freq, max_freq_hz=freq)
        twin.tick()
        assert node.cur_freq_hz() == freq
    node.restore(original)
    assert node.current_range() == original
    with node.pinned(table[-1]) as previous:
        assert previous == original
        assert node.min_freq_hz() == table[-1]
    assert node.current_range() == original


def test_wrong_frequency_lists_valid_ones_in_mhz(tmp_path: Path) -> None:
    with DeviceTwin("jetson-nano", tmp_path, noise_rel=0.0, cost_of=workload_cost) as _twin:
        node = GpuDevfreq.discover(tmp_path)
        with pytest.raises(UnsupportedFrequencyError) as info:
            node.pin(500_000_000)
        msg = str(info.value)
        assert "500 MHz" in msg and "not in the table" in msg
        assert "76.8, 153.6, 230.4, 307.2, 384, 460.8" in msg and "921.6" in msg
        assert node.current_range().min_freq_hz == 76_800_000  # nothing was written


@pytest.mark.parametrize("board", ["jetson-nano", "jetson-tx2-nx"])
def test_naive_order_fails_on_49_kernel_ours_succeeds(board: str, tmp_path: Path) -> None:
    twin = DeviceTwin(board, tmp_path, noise_rel=0.0, cost_of=workload_cost).build()
    try:
        node = GpuDevfreq.discover(tmp_path)
        table = node.available_frequencies_hz()
        low, high = table[0], table[-1]
        node.pin(low)
        # Naive raise: min first while max is still low -> EINVAL like min_freq_store on 4.9.
        with pytest.raises(OSError) as err:
            write_value(node.path / "min_freq", str(high))
        assert err.value.errno == errno.EINVAL
        assert node.current_range() == FrequencyRange(min_freq_hz=low, max_freq_hz=low)
        node.pin(high)  # ours: max then min
        assert node.current_range() == FrequencyRange(min_freq_hz=high, max_freq_hz=high)
        # Naive lower: max first while min is still high -> EINVAL.
        with pytest.raises(OSError) as err:
            write_value(node.path / "max_freq", str(low))
        assert err.value.errno == errno.EINVAL
        node.pin(low)  # ours: min then max
        assert node.current_range() == FrequencyRange(min_freq_hz=low, max_freq_hz=low)
    finally:
        twin.stop()


def test_new_kernel_accepts_any_order(tmp_path: Path) -> None:
    twin = DeviceTwin("jetson-agx-orin", tmp_path, noise_rel=0.0, cost_of=workload_cost).build()
    try:
        node = GpuDevfreq.discover(tmp_path)
        table = node.available_frequencies_hz()
        node.pin(table[0])
        write_value(node.path / "min_freq", str(table[-1]))  # fine on PM-QoS kernels [R21]
        write_value(node.path / "max_freq", str(table[-1]))
        assert node.current_range().min_freq_hz == table[-1]
    finally:
        twin.stop()


@pytest.fixture
def built_nano(tmp_path: Path) -> Iterator[tuple[DeviceTwin, GpuDevfreq]]:
    """A Nano twin that ticks only when told (`tick(now=...)`), and its devfreq node."""
    twin = DeviceTwin("jetson-nano", tmp_path, noise_rel=0.0, cost_of=workload_cost).build()
    try:
        yield twin, GpuDevfreq.discover(tmp_path)
    finally:
        twin.stop()


def test_cross_process_writes_are_reconciled(built_nano: tuple[DeviceTwin, GpuDevfreq]) -> None:
    twin, node = built_nano
    # Another process writes the plain file (no hook): a between-OPP value snaps up [R22].
    (node.path / "max_freq").write_text("600000000\n")
    twin.tick()
    assert node.max_freq_hz() == 614_400_000
    assert node.cur_freq_hz() == 76_800_000  # idle: the governor sits at min_freq
    twin.set_workload("resnet8", 16)
    assert node.cur_freq_hz() == 614_400_000  # busy: up to max_freq
    # On a 4.9 board an inconsistent pair is reverted, as a failed store would leave it,
    # once it has stayed inconsistent (a pair read between two stores looks the same).
    (node.path / "min_freq").write_text("921600000\n")
    twin.tick(now=100.0)
    assert node.min_freq_hz() == 921_600_000
    twin.tick(now=100.0 + DEVFREQ_REPAIR_S)
    assert node.current_range() == FrequencyRange(min_freq_hz=76_800_000, max_freq_hz=614_400_000)


def test_a_pair_read_between_two_stores_is_not_undone(
    built_nano: tuple[DeviceTwin, GpuDevfreq],
) -> None:
    twin, node = built_nano
    # Another process pins 921.6 MHz: min first, then max. The twin ticks in between.
    (node.path / "min_freq").write_text("921600000\n")
    (node.path / "max_freq").write_text("76800000\n")  # the other file, as a tick reads it
    twin.tick(now=100.0)
    (node.path / "max_freq").write_text("921600000\n")
    twin.tick(now=100.1)
    assert node.current_range() == FrequencyRange(min_freq_hz=921_600_000, max_freq_hz=921_600_000)


def test_a_file_left_empty_by_a_dead_writer_is_repaired(
    built_nano: tuple[DeviceTwin, GpuDevfreq],
) -> None:
    twin, node = built_nano
    before = node.current_range()
    (node.path / "max_freq").write_text("")  # killed between its truncate and write
    twin.tick(now=100.0)
    assert (node.path / "max_freq").read_text() == ""  # the writer may still finish
    twin.tick(now=100.0 + DEVFREQ_REPAIR_S)
    assert node.current_range() == before


def test_a_store_through_a_file_opened_before_the_twin_rewrote_it_lands(
    built_nano: tuple[DeviceTwin, GpuDevfreq],
) -> None:
    """The twin stores in place, as the kernel does: a writer in another process that opened
    max_freq just before the twin snapped it still writes the file readers see (a replaced
    inode would have taken that store with it)."""
    twin, node = built_nano
    (node.path / "max_freq").write_text("600000000\n")
    fd = os.open(node.path / "max_freq", os.O_WRONLY)  # the writer's open ...
    try:
        twin.tick()  # ... the twin snaps 600 MHz up to 614.4 MHz meanwhile ...
        assert node.max_freq_hz() == 614_400_000
        os.write(fd, b"460800000\n")  # ... then its store
    finally:
        os.close(fd)
    twin.tick()
    assert node.max_freq_hz() == 460_800_000


def test_live_files_keep_their_inode_and_the_state_follows_a_mode_at_once(
        tmp_path: Path) -> None:
    """Each tick stores power and clock in place (one inode, as sysfs), and the state file,
    otherwise rewritten once a second, changes on the tick that sees a new workload."""
    twin = DeviceTwin("jetson-nano", tmp_path, cost_of=workload_cost).build()
    try:
        sensor = SysfsPowerSensor.discover(tmp_path)
        power = next(p for p in (tmp_path / twin.spec.sensors[0].path).iterdir()
                     if p.name.startswith("in_power"))
        inode = power.stat().st_ino
        first = sensor.read().total_power_w
        for i in range(1, 6):
            twin.tick(now=100.0 + 0.1 * i)
        assert power.stat().st_ino == inode
        assert sensor.read().total_power_w != first  # the noise moved it, in place
        assert (state := read_state(tmp_path)) is not None and not state.workload.busy
        twin.set_workload("resnet8", 16)
        assert (state := read_state(tmp_path)) is not None and state.workload.busy
    finally:
        twin.stop()
