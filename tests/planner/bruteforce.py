"""A deliberately naive reference planner: loop over every point, sort by the contract's key."""

from __future__ import annotations

import math

from edgetrain.api import Objective, PowerMetric, ProfilePoint


def brute_force_select(
    points: list[ProfilePoint],
    r_by_batch: dict[int, float],
    power_limit_w: float,
    metric: PowerMetric = PowerMetric.peak,
    objective: Objective = Objective.time,
) -> ProfilePoint | None:
    """Smallest predicted cost with power ≤ limit; ties: larger batch, then lower mode."""
    best: tuple[float, int, tuple[int, int, int, int]] | None = None
    chosen: ProfilePoint | None = None
    for p in points:
        if p.batch_size not in r_by_batch or math.isnan(r_by_batch[p.batch_size]):
            continue
        power = p.peak_power_w if metric is PowerMetric.peak else p.mean_power_w
        if not power <= power_limit_w:
            continue
        cost = p.time_per_sample_s * r_by_batch[p.batch_size]
        if objective is Objective.energy:
            cost = p.mean_power_w * cost
        key = (cost, -p.batch_size, p.mode)
        if best is None or key < best:
            best, chosen = key, p
    return chosen
