"""Frontier profiling order (first paper, §4.1): measure only what the limit leaves reachable."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

from edgetrain.api.plan import PowerMetric
from edgetrain.api.profile import ProfilePoint

Measure = Callable[[int, int], ProfilePoint]
"""Profiles one (batch_size, gpu_freq_hz) point on the device."""


def _power(point: ProfilePoint, metric: PowerMetric) -> float:
    return point.peak_power_w if metric is PowerMetric.peak else point.mean_power_w


def frontier_order(
    batch_sizes: Sequence[int],
    gpu_freqs_hz: Sequence[int],
    measure: Measure,
    power_limit_w: float,
    metric: PowerMetric = PowerMetric.peak,
) -> Generator[ProfilePoint, None, None]:
    """Yield measured points in frontier order.

    The largest batch size goes from the lowest frequency up until it exceeds the limit; each
    smaller batch size starts at the highest frequency feasible so far. Since power rises with
    both b and f, no point known to be infeasible is measured, and the points skipped below the
    start are slower than a feasible point already in the table.
    """
    batches = sorted(batch_sizes, reverse=True)
    freqs = sorted(gpu_freqs_hz)
    start = 0
    for b in batches:
        j = start
        highest_feasible: int | None = None
        while j < len(freqs):
            point = measure(b, freqs[j])
            yield point
            if _power(point, metric) > power_limit_w:
                break
            highest_feasible = j
            j += 1
        if highest_feasible is not None:
            start = highest_feasible


@dataclass(frozen=True)
class FrontierResult:
    """Points measured by the frontier order, and the size of the full grid."""

    points: list[ProfilePoint]
    grid_size: int

    @property
    def measured(self) -> int:
        """Number of measured points."""
        return len(self.points)


def profile_frontier(
    batch_sizes: Sequence[int],
    gpu_freqs_hz: Sequence[int],
    measure: Measure,
    power_limit_w: float,
    metric: PowerMetric = PowerMetric.peak,
) -> FrontierResult:
    """Run the frontier order to the end and collect its points."""
    points = list(frontier_order(batch_sizes, gpu_freqs_hz, measure, power_limit_w, metric))
    return FrontierResult(points, len(set(batch_sizes)) * len(set(gpu_freqs_hz)))


def baseline_column(
    points: Sequence[ProfilePoint],
    batch_sizes: Sequence[int],
    power_limit_w: float,
    metric: PowerMetric = PowerMetric.peak,
) -> tuple[int | None, list[tuple[int, int]]]:
    """The baselines' safe frequency after a frontier run, and the points still to measure there.

    Power rises with b, so the highest frequency at which the largest batch fits is safe for
    every batch size (the paper's fixed baseline frequency); B1/B2 need every b timed there.
    """
    largest = max(batch_sizes)
    fits = [
        p.gpu_freq_hz
        for p in points
        if p.batch_size == largest and _power(p, metric) <= power_limit_w
    ]
    if not fits:
        return None, []
    freq = max(fits)
    measured = {(p.batch_size, p.gpu_freq_hz) for p in points}
    return freq, [(b, freq) for b in sorted(batch_sizes) if (b, freq) not in measured]
