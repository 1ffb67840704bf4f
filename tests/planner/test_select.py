"""Selection equals the brute-force argmin, and reproduces the paper's Figure 1 choice."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.api import Objective, PowerMetric, ProfilePoint
from edgetrain.planner import Lut, select
from edgetrain.planner.synthetic import synthetic_lut
from tests.conftest import FIGURE1_POINTS, MHZ
from tests.planner.bruteforce import brute_force_select

BATCHES = [4, 8, 16, 32, 64, 128]
FREQS = [76_800_000 * k for k in range(1, 13)]

# Few distinct values so that equal costs (ties) are common.
times = st.sampled_from([0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008])
powers = st.sampled_from([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])


@st.composite
def profiles(draw: st.DrawFn) -> list[ProfilePoint]:
    batches = draw(st.lists(st.sampled_from(BATCHES), min_size=1, max_size=4, unique=True))
    freqs = draw(st.lists(st.sampled_from(FREQS), min_size=1, max_size=6, unique=True))
    monotone = draw(st.booleans())
    points = []
    for b in batches:
        for k, f in enumerate(sorted(freqs)):
            if draw(st.integers(0, 5)) == 0:
                continue  # a missing point
            if monotone:
                t = 0.01 / (k + 1) * (1 + 1 / b)
                p = 1.0 + 0.5 * (k + 1) + math.log2(b) * 0.1
            else:
                t, p = draw(times), draw(powers)
            mean = p * draw(st.sampled_from([0.5, 0.8, 1.0]))
            points.append(
                ProfilePoint(
                    batch_size=b,
                    gpu_freq_hz=f,
                    time_per_sample_s=t,
                    peak_power_w=p,
                    mean_power_w=mean,
                )
            )
    return points


@settings(max_examples=400, deadline=None)
@given(
    points=profiles(),
    r_values=st.lists(
        st.one_of(st.sampled_from([0.5, 1.0]), st.floats(0.01, 1.0), st.just(math.nan)),
        min_size=len(BATCHES),
        max_size=len(BATCHES),
    ),
    limit=st.one_of(
        st.sampled_from([1.0, 2.5, 3.0, 4.0, 5.0, 6.0]), st.floats(0.5, 8.0), st.just(math.inf)
    ),
    metric=st.sampled_from(list(PowerMetric)),
    objective=st.sampled_from(list(Objective)),
)
def test_select_equals_brute_force(
    points: list[ProfilePoint],
    r_values: list[float],
    limit: float,
    metric: PowerMetric,
    objective: Objective,
) -> None:
    if not points:
        return
    lut = Lut.from_points(points)
    r_by_batch = dict(zip(BATCHES, r_values, strict=True))
    r = np.array([r_by_batch[int(b)] for b in lut.batch_sizes])
    expected = brute_force_select(points, r_by_batch, limit, metric, objective)
    for fast in (True, False):
        choice = select(lut, r, limit, metric=metric, objective=objective, fast_path=fast)
        if expected is None:
            assert choice is None
            continue
        assert choice is not None
        got = (int(lut.batch_sizes[choice.row]), tuple(int(v) for v in lut.modes[choice.column]))
        assert got == (expected.batch_size, expected.mode)


def test_figure1_picks_smaller_batch_at_higher_frequency() -> None:
    lut = Lut.from_points(FIGURE1_POINTS)
    r = np.array([1.0, 1.0])  # equal efficiency: only the device decides
    choice = select(lut, r, 5.0)
    assert choice is not None
    assert int(lut.batch_sizes[choice.row]) == 64
    assert int(lut.gpu_freqs_hz[choice.column]) == 460_800_000
    # b=128 alone is held to 307.2 MHz under 5 W.
    only_128 = select(lut, np.array([math.nan, 1.0]), 5.0)
    assert only_128 is not None and int(lut.gpu_freqs_hz[only_128.column]) == 307_200_000
    saving = 1 - choice.objective / only_128.objective
    assert saving == pytest.approx(0.319, abs=0.001)


def test_large_batch_wins_when_its_efficiency_is_good_enough() -> None:
    lut = Lut.from_points(FIGURE1_POINTS)
    # b=64 needs twice the samples of b=128: 2 × 6.81 ms > 10 ms.
    choice = select(lut, np.array([1.0, 0.5]), 5.0)
    assert choice is not None and int(lut.batch_sizes[choice.row]) == 128


def test_monotone_rows_take_the_binary_search_path() -> None:
    lut = Lut.from_points(FIGURE1_POINTS)
    assert all(row is not None for row in lut.monotone_rows(PowerMetric.peak))
    noisy = synthetic_lut([4, 8], 50, monotone=False, seed=3)
    assert all(row is None for row in noisy.monotone_rows(PowerMetric.peak))


def test_ties_break_to_larger_batch_then_lower_frequency() -> None:
    pts = [
        ProfilePoint(
            batch_size=b,
            gpu_freq_hz=f * MHZ,
            time_per_sample_s=0.01,
            peak_power_w=3.0,
            mean_power_w=3.0,
        )
        for b in (8, 16)
        for f in (100, 200)
    ]
    lut = Lut.from_points(pts)
    choice = select(lut, np.array([1.0, 1.0]), 5.0)
    assert choice is not None
    assert (int(lut.batch_sizes[choice.row]), int(lut.gpu_freqs_hz[choice.column])) == (
        16,
        100 * MHZ,
    )


def test_energy_objective_prefers_the_cheaper_point() -> None:
    # Fast but power-hungry (10 W × 1 ms) against slower and frugal (4 W × 1.5 ms).
    pts = [
        ProfilePoint(
            batch_size=8, gpu_freq_hz=f * MHZ, time_per_sample_s=t, peak_power_w=p, mean_power_w=p
        )
        for f, t, p in ((500, 0.0015, 4.0), (900, 0.001, 10.0))
    ]
    lut = Lut.from_points(pts)
    time_choice = select(lut, np.array([1.0]), math.inf)
    energy_choice = select(lut, np.array([1.0]), math.inf, objective=Objective.energy)
    assert time_choice is not None and energy_choice is not None
    assert int(lut.gpu_freqs_hz[time_choice.column]) == 900 * MHZ
    assert int(lut.gpu_freqs_hz[energy_choice.column]) == 500 * MHZ
    assert energy_choice.objective == pytest.approx(0.006)


def test_r_shape_must_match() -> None:
    lut = Lut.from_points(FIGURE1_POINTS)
    with pytest.raises(ValueError, match="r has shape"):
        select(lut, np.array([1.0]), 5.0)
