"""The benchmark's arithmetic: statistics over seeds, time to accuracy, profiling cost, noise."""

from __future__ import annotations

import math
import statistics
import zlib
from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel

from edgetrain.api.plan import PowerMetric
from edgetrain.api.profile import ProfilePoint
from edgetrain.bench.paper.config import ProfilingCost
from edgetrain.planner import (
    Lut,
    Measure,
    select,
)

#: Two-sided 95 % Student-t quantiles t(0.975, df) for df = 1..30 (no SciPy here).
T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


class Stat(BaseModel):
    """Mean ± sample standard deviation over seeds; `missing` seeds had no value.

    `ci95` is the 95 % Student-t interval of the mean over the finite values (None below 2).
    """

    mean: float | None
    std: float | None
    n: int
    missing: int = 0
    ci95: tuple[float, float] | None = None


def t975(df: int) -> float:
    """The 97.5 % Student-t quantile (1.96 beyond 30 degrees of freedom)."""
    if df < 1:
        raise ValueError("a t-interval needs at least two values")
    return T975[df - 1] if df <= len(T975) else 1.96


def mean_std(values: Iterable[float | None]) -> Stat:
    """Mean, sample std (ddof=1; 0 for one value) and 95 % t-interval of the finite values."""
    vals = list(values)
    finite = [v for v in vals if v is not None and math.isfinite(v)]
    missing = len(vals) - len(finite)
    if not finite:
        return Stat(mean=None, std=None, n=0, missing=missing)
    mean = statistics.fmean(finite)
    if len(finite) == 1:
        return Stat(mean=mean, std=0.0, n=1, missing=missing)
    std = statistics.stdev(finite)
    half = t975(len(finite) - 1) * std / math.sqrt(len(finite))
    return Stat(mean=mean, std=std, n=len(finite), missing=missing, ci95=(mean - half, mean + half))


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def time_to_accuracy_s(time_per_sample_s: float, samples: float | None) -> float | None:
    """`T_s × N`: seconds to the target accuracy (None when the target was never reached)."""
    return None if samples is None else time_per_sample_s * samples


def point_device_time_s(time_per_batch_s: float, cost: ProfilingCost) -> float:
    """Device seconds to profile one point: warm-up, stabilisation wait, then the timed window."""
    window = max((cost.minibatches - 1) * time_per_batch_s, cost.min_window_s)
    return time_per_batch_s + cost.stabilise_s + window


def profiling_device_time_s(points: Sequence[ProfilePoint], cost: ProfilingCost) -> float:
    """Device seconds a profile of these measured points takes."""
    return sum(point_device_time_s(p.time_per_sample_s * p.batch_size, cost) for p in points)


def baseline_batches(
    batch_sizes: Sequence[int], proxy_samples: Sequence[float | None]
) -> tuple[int, int | None]:
    """B1's and B2's batch sizes: the largest, and the one the proxy says needs fewest samples.

    Ties go to the larger batch (as in the planner); B2 is None if no batch size reached the
    target on the proxy.
    """
    reached = [(s, b) for b, s in zip(batch_sizes, proxy_samples, strict=True) if s is not None]
    b2 = min(reached, key=lambda sb: (sb[0], -sb[1]))[1] if reached else None
    return max(batch_sizes), b2


def aligned(batch_sizes: Sequence[int], values: dict[int, float]) -> NDArray[np.float64]:
    """A per-batch-size array (NaN where absent) in `batch_sizes` order."""
    return np.array([values.get(int(b), np.nan) for b in batch_sizes], dtype=np.float64)


def oracle_cell(
    truth: Lut, target_samples: NDArray[np.float64], power_limit_w: float, metric: PowerMetric
) -> tuple[int, int] | None:
    """The (row, column) of the true grid minimising `T_s × N_target` within the limit."""
    choice = select(truth, target_samples, power_limit_w, metric=metric, fast_path=False)
    return None if choice is None else (choice.row, choice.column)


def noisy_measure(
    truth: Lut, rng: np.random.Generator, cost: ProfilingCost
) -> tuple[list[ProfilePoint], Measure]:
    """A `Measure` on the true grid with seeded multiplicative noise, and the list it fills."""
    measured: list[ProfilePoint] = []
    row_of = {int(b): i for i, b in enumerate(truth.batch_sizes)}
    col_of = {int(f): j for j, f in enumerate(truth.gpu_freqs_hz)}

    def measure(batch_size: int, gpu_freq_hz: int) -> ProfilePoint:
        i, j = row_of[batch_size], col_of[gpu_freq_hz]
        # Log-normal factors: ≈ 1 + σz for small σ, and never a negative time or power.
        z_time, z_peak, z_mean = rng.standard_normal(3)
        peak = float(truth.peak_power_w[i, j]) * math.exp(cost.power_noise * z_peak)
        mean = float(truth.mean_power_w[i, j]) * math.exp(cost.power_noise * z_mean)
        point = ProfilePoint(
            batch_size=batch_size,
            gpu_freq_hz=gpu_freq_hz,
            time_per_sample_s=float(truth.time_per_sample_s[i, j])
            * math.exp(cost.time_noise * z_time),
            peak_power_w=peak,
            mean_power_w=min(mean, peak),
        )
        measured.append(point)
        return point

    return measured, measure


def case_seed(*parts: object) -> list[int]:
    """A stable RNG seed sequence for one case (Python's hash() is salted per process)."""
    return [zlib.crc32("|".join(str(p) for p in parts).encode())]
