"""`edgetrain bench planner`: selection time, Algorithm 1's fast path against the exhaustive
masked argmin on the same LUTs in the same run."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
from pydantic import BaseModel
from rich.progress import Progress

from edgetrain.api.plan import PowerMetric
from edgetrain.planner import Lut, select
from edgetrain.planner.synthetic import synthetic_lut

SELECTION_BUDGET_S = 0.010


class PlannerBenchRow(BaseModel):
    """Selection timing for one LUT size."""

    batch_sizes: int
    modes: int
    points: int
    monotone: bool
    prepare_s: float
    fast_select_s: float
    exhaustive_select_s: float
    speedup: float
    within_budget: bool


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm caches so the first call does not count
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def bench_planner_rows(
    n_batch_sizes: int, mode_counts: list[int], repeats: int, progress: Progress | None = None
) -> list[PlannerBenchRow]:
    """Time fast-path and exhaustive selection on monotone and full-mode-like LUTs."""
    batch_sizes = [2 ** (i + 2) for i in range(n_batch_sizes)]
    r = np.linspace(0.4, 1.0, n_batch_sizes)
    rows: list[PlannerBenchRow] = []
    task = progress.add_task("planner", total=2 * len(mode_counts)) if progress else None
    for n_modes in mode_counts:
        for monotone in (True, False):
            lut = synthetic_lut(batch_sizes, n_modes, monotone=monotone, seed=n_modes)
            limits = np.quantile(lut.peak_power_w, [0.2, 0.4, 0.6, 0.8])

            def prepare(lut: Lut = lut) -> None:
                Lut(
                    lut.batch_sizes,
                    lut.modes,
                    lut.time_per_sample_s,
                    lut.peak_power_w,
                    lut.mean_power_w,
                ).monotone_rows(PowerMetric.peak)

            def run(fast: bool, lut: Lut = lut, limits: np.ndarray = limits) -> None:
                for limit in limits:
                    select(lut, r, float(limit), fast_path=fast)

            prep = _median_seconds(prepare, repeats)
            fast_s = _median_seconds(lambda: run(True), repeats) / len(limits)
            slow_s = _median_seconds(lambda: run(False), repeats) / len(limits)
            rows.append(
                PlannerBenchRow(
                    batch_sizes=n_batch_sizes,
                    modes=n_modes,
                    points=n_batch_sizes * n_modes,
                    monotone=monotone,
                    prepare_s=prep,
                    fast_select_s=fast_s,
                    exhaustive_select_s=slow_s,
                    speedup=slow_s / fast_s,
                    within_budget=fast_s < SELECTION_BUDGET_S,
                )
            )
            if progress and task is not None:
                progress.advance(task)
    return rows
