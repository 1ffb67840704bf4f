"""plan(): baselines B1/B2, the oracle, exclusions and infeasibility."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgetrain.api import EfficiencyVector, Objective, PowerMetric, ProfilePoint
from edgetrain.planner import (
    InfeasibleError,
    Lut,
    PlanInputError,
    baseline_frequency_for_limit,
    plan,
    safe_frequency_hz,
)
from tests.conftest import FIGURE1_POINTS


def _vector(samples: dict[int, float | None]) -> EfficiencyVector:
    return EfficiencyVector.from_samples(
        model="resnet18",
        dataset="cifar10",
        target_accuracy=0.87,
        batch_sizes=list(samples),
        samples_to_accuracy=list(samples.values()),
    )


LUT = Lut.from_points(FIGURE1_POINTS)


def test_plan_and_baselines_on_figure1() -> None:
    # b=64 needs 10 % fewer samples than b=128 on the proxy.
    result = plan(LUT, _vector({64: 36000.0, 128: 40000.0}), 5.0)
    assert (result.batch_size, result.gpu_freq_hz) == (64, 460_800_000)
    assert result.relative_time == pytest.approx(0.00681 * 0.9)
    assert result.predicted_seconds == pytest.approx(0.00681 * 36000)
    assert result.power_w == 4.9 and result.within_limit
    # Safe for every batch size under 5 W: 307.2 MHz (b=128 is 5.2 W at 384 MHz).
    b1, b2 = result.baselines["B1"], result.baselines["B2"]
    assert (b1.batch_size, b1.gpu_freq_hz) == (128, 307_200_000)
    assert (b2.batch_size, b2.gpu_freq_hz) == (64, 307_200_000)
    assert b1.ratio_to_plan == pytest.approx(0.0100 * 1.0 / (0.00681 * 0.9))
    assert b2.ratio_to_plan == pytest.approx(0.0102 * 0.9 / (0.00681 * 0.9))
    assert result.profiled_points == 8
    assert result.feasible_points == 4  # 128@307.2, 64@307.2/384/460.8
    assert result.warnings == []


def test_explicit_baseline_frequency_and_over_limit_flag() -> None:
    result = plan(LUT, _vector({64: 1.0, 128: 1.0}), 5.0, baseline_freq_hz=384_000_000)
    assert result.baselines["B1"].gpu_freq_hz == 384_000_000
    assert result.baselines["B1"].within_limit is False  # 5.2 W at b=128


def test_baseline_frequency_table_picks_tightest_limit_below() -> None:
    table = {4.5: 307_200_000, 7.0: 614_400_000, math.inf: 921_600_000}
    assert baseline_frequency_for_limit(table, 5.0) == 307_200_000
    assert baseline_frequency_for_limit(table, 7.0) == 614_400_000
    assert baseline_frequency_for_limit(table, math.inf) == 921_600_000
    with pytest.raises(PlanInputError, match="no baseline frequency is listed"):
        baseline_frequency_for_limit(table, 4.0)


def test_unknown_baseline_frequency_is_bad_input() -> None:
    with pytest.raises(
        PlanInputError, match=r"999 MHz is not in the profile \(profiled MHz: 307.2"
    ):
        plan(LUT, _vector({64: 1.0, 128: 1.0}), 5.0, baseline_freq_hz=999_000_000)


def test_oracle_ratio_is_plan_over_true_best() -> None:
    proxy = _vector({64: 40000.0, 128: 40000.0})
    truth = _vector({64: 80000.0, 128: 40000.0})  # on target data b=64 is much worse
    result = plan(LUT, proxy, 5.0, oracle=truth)
    oracle = result.baselines["oracle"]
    assert (oracle.batch_size, oracle.gpu_freq_hz) == (128, 307_200_000)
    # plan's true cost: 6.81 ms × 1.0; oracle: 10 ms × 0.5
    assert oracle.ratio_to_plan == pytest.approx(0.005 / 0.00681)


def test_excluded_batch_sizes_are_warned() -> None:
    result = plan(LUT, _vector({32: 1.0, 64: 2.0, 128: None}), math.inf)
    assert result.batch_size == 64
    assert result.power_limit_w is None
    assert result.warnings == [
        "batch size 32 is in the efficiency vector but has no profile rows; excluded",
        "batch size 128 never reached the target accuracy; excluded",
    ]


def test_no_overlap_is_bad_input() -> None:
    with pytest.raises(PlanInputError, match=r"profiled \[64, 128\], efficiency \[8\]"):
        plan(LUT, _vector({8: 1.0}), 5.0)


def test_infeasible_names_limit_and_lowest_power() -> None:
    with pytest.raises(InfeasibleError) as info:
        plan(LUT, _vector({64: 1.0, 128: 1.0}), 4.0)
    assert str(info.value) == (
        "no profiled point is within the power limit of 4 W (peak power); the lowest profiled"
        " peak power is 4.100 W (batch size 64 at 307.2 MHz)"
    )


def test_mean_metric_and_energy_objective() -> None:
    result = plan(
        LUT, _vector({64: 1.0, 128: 1.0}), 5.0, metric=PowerMetric.mean, objective=Objective.energy
    )
    assert result.power_metric is PowerMetric.mean
    assert result.power_w <= 5.0
    energy = LUT.mean_power_w * LUT.time_per_sample_s
    feasible = np.where(LUT.mean_power_w <= 5.0, energy, np.inf)
    assert result.relative_energy_j == pytest.approx(float(feasible.min()))


def test_safe_frequency_none_when_limit_below_every_batch() -> None:
    assert safe_frequency_hz(LUT, np.ones(2), 4.5, PowerMetric.peak) is None
    assert safe_frequency_hz(LUT, np.array([1.0, np.nan]), 4.5, PowerMetric.peak) == 384_000_000


def test_non_positive_limit_is_bad_input() -> None:
    with pytest.raises(PlanInputError, match="must be > 0 W"):
        plan(LUT, _vector({64: 1.0}), 0.0)


def test_full_power_modes_plan_reports_mode_fields() -> None:
    pts = [
        ProfilePoint(
            batch_size=8,
            gpu_freq_hz=g,
            cpu_cores=c,
            cpu_freq_hz=1_000_000_000,
            emc_freq_hz=2_133_000_000,
            time_per_sample_s=t,
            peak_power_w=p,
            mean_power_w=p,
        )
        for g, c, t, p in (
            (600_000_000, 4, 0.004, 10.0),
            (600_000_000, 8, 0.0035, 12.0),
            (900_000_000, 4, 0.003, 14.0),
        )
    ]
    result = plan(Lut.from_points(pts), _vector({8: 1.0}), 13.0)
    assert (result.gpu_freq_hz, result.cpu_cores) == (600_000_000, 8)
    assert result.emc_freq_hz == 2_133_000_000
