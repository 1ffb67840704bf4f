"""Frontier profiling order: fewer measurements, same selection, no known-infeasible point."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.api import PowerMetric, ProfilePoint
from edgetrain.planner import (
    Lut,
    baseline_column,
    frontier_order,
    profile_frontier,
    safe_frequency_hz,
    select,
)
from edgetrain.planner.synthetic import synthetic_lut

BATCHES = [4, 8, 16, 32, 64, 128]


def _measure_from(lut: Lut, log: list[tuple[int, int]]):  # type: ignore[no-untyped-def]
    row = {int(b): i for i, b in enumerate(lut.batch_sizes)}
    col = {int(f): j for j, f in enumerate(lut.gpu_freqs_hz)}

    def measure(batch_size: int, gpu_freq_hz: int) -> ProfilePoint:
        log.append((batch_size, gpu_freq_hz))
        i, j = row[batch_size], col[gpu_freq_hz]
        return ProfilePoint(
            batch_size=batch_size,
            gpu_freq_hz=gpu_freq_hz,
            time_per_sample_s=float(lut.time_per_sample_s[i, j]),
            peak_power_w=float(lut.peak_power_w[i, j]),
            mean_power_w=float(lut.mean_power_w[i, j]),
        )

    return measure


@settings(max_examples=150, deadline=None)
@given(
    n_batches=st.integers(1, 6),
    n_freqs=st.integers(2, 25),
    quantile=st.floats(0.0, 1.0),
    r=st.lists(st.floats(0.05, 1.0), min_size=6, max_size=6),
)
def test_frontier_selection_equals_full_grid(
    n_batches: int, n_freqs: int, quantile: float, r: list[float]
) -> None:
    full = synthetic_lut(BATCHES[:n_batches], n_freqs, monotone=True)
    limit = float(np.quantile(full.peak_power_w, quantile))
    log: list[tuple[int, int]] = []
    result = profile_frontier(
        full.batch_sizes.tolist(), full.gpu_freqs_hz.tolist(), _measure_from(full, log), limit
    )
    assert result.grid_size == n_batches * n_freqs
    assert result.measured == len(log) == len(set(log))  # each point at most once
    r_vec = np.array(r[:n_batches])
    expected = select(full, r_vec, limit)
    got = select(Lut.from_points(result.points), r_vec, limit)
    if expected is None:
        assert got is None
        return
    assert got is not None
    sub = Lut.from_points(result.points)
    assert int(sub.batch_sizes[got.row]) == int(full.batch_sizes[expected.row])
    assert int(sub.gpu_freqs_hz[got.column]) == int(full.gpu_freqs_hz[expected.column])

    # Never a point known infeasible: no measured point dominates an earlier infeasible one.
    infeasible: list[tuple[int, int]] = []
    for p in result.points:
        assert not any(p.batch_size >= b and p.gpu_freq_hz >= f for b, f in infeasible)
        if p.peak_power_w > limit:
            infeasible.append((p.batch_size, p.gpu_freq_hz))


def test_frontier_measures_strictly_fewer_points_on_a_monotone_profile() -> None:
    full = synthetic_lut(BATCHES, 12, monotone=True)
    limit = float(np.quantile(full.peak_power_w, 0.5))
    log: list[tuple[int, int]] = []
    result = profile_frontier(BATCHES, full.gpu_freqs_hz.tolist(), _measure_from(full, log), limit)
    assert result.measured < result.grid_size
    # The largest batch starts from the lowest frequency.
    assert log[0] == (128, int(full.gpu_freqs_hz[0]))
    assert select(Lut.from_points(result.points), np.ones(6), limit) is not None


def test_frontier_is_lazy() -> None:
    full = synthetic_lut(BATCHES, 12, monotone=True)
    log: list[tuple[int, int]] = []
    gen = frontier_order(BATCHES, full.gpu_freqs_hz.tolist(), _measure_from(full, log), 1e9)
    first = next(gen)
    assert len(log) == 1 and first.batch_size == 128


def test_mean_metric_reaches_higher_frequencies() -> None:
    full = synthetic_lut(BATCHES, 12, monotone=True)
    limit = float(np.quantile(full.peak_power_w, 0.4))
    peak = profile_frontier(BATCHES, full.gpu_freqs_hz.tolist(), _measure_from(full, []), limit)
    mean = profile_frontier(
        BATCHES, full.gpu_freqs_hz.tolist(), _measure_from(full, []), limit, PowerMetric.mean
    )
    assert max(p.gpu_freq_hz for p in mean.points) >= max(p.gpu_freq_hz for p in peak.points)


def test_baseline_column_completes_the_safe_frequency() -> None:
    full = synthetic_lut(BATCHES, 12, monotone=True)
    limit = float(np.quantile(full.peak_power_w, 0.5))
    result = profile_frontier(BATCHES, full.gpu_freqs_hz.tolist(), _measure_from(full, []), limit)
    freq, missing = baseline_column(result.points, BATCHES, limit)
    assert freq is not None
    # The largest batch fits at `freq` but not one step higher (if it was measured there).
    largest = [p for p in result.points if p.batch_size == 128]
    assert max(p.gpu_freq_hz for p in largest if p.peak_power_w <= limit) == freq
    assert missing and all(f == freq for _, f in missing)
    measured = {(p.batch_size, p.gpu_freq_hz) for p in result.points}
    assert {b for b, _ in missing} == {b for b in BATCHES if (b, freq) not in measured}
    # Once measured, the planner's safe frequency is exactly that column.
    extra = [_measure_from(full, [])(b, f) for b, f in missing]
    lut = Lut.from_points([*result.points, *extra])
    assert safe_frequency_hz(lut, np.ones(6), limit, PowerMetric.peak) == freq
    # Before, the column was incomplete, so it could not be called safe.
    partial = Lut.from_points(result.points)
    assert safe_frequency_hz(partial, np.ones(6), limit, PowerMetric.peak) != freq
    assert baseline_column(result.points, BATCHES, 0.01) == (None, [])
