"""From a profile and an efficiency vector to a plan with its baselines (pure, no I/O)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.errors import BadInputError, InfeasibleError
from edgetrain.api.plan import BaselinePoint, Objective, PlanPoint, PlanResult, PowerMetric
from edgetrain.planner.lut import Lut
from edgetrain.planner.select import Choice, objective_matrix, select


class PlanInputError(BadInputError):
    """The profile and efficiency vector (or options) cannot be planned on together."""


def align_efficiency(
    lut: Lut, efficiency: EfficiencyVector
) -> tuple[NDArray[np.float64], NDArray[np.float64], list[str]]:
    """r and samples-to-accuracy per LUT row (NaN where excluded), and why rows were excluded."""
    r_of, samples_of = efficiency.r_by_batch_size(), efficiency.samples_by_batch_size()
    profiled = {int(b) for b in lut.batch_sizes}
    warnings = [
        f"batch size {b} is in the efficiency vector but has no profile rows; excluded"
        for b in efficiency.batch_sizes
        if b not in profiled
    ]
    for b in lut.batch_sizes:
        if int(b) not in efficiency.batch_sizes:
            warnings.append(
                f"batch size {b} is profiled but not in the efficiency vector; excluded"
            )
        elif int(b) not in r_of:
            warnings.append(f"batch size {b} never reached the target accuracy; excluded")
    r = np.array([r_of.get(int(b), np.nan) for b in lut.batch_sizes], dtype=np.float64)
    samples = np.array([samples_of.get(int(b), np.nan) for b in lut.batch_sizes])
    if np.all(np.isnan(r)):
        raise PlanInputError(
            "no batch size has both profile rows and an efficiency entry: profiled "
            f"{sorted(profiled)}, efficiency {efficiency.batch_sizes}"
        )
    return r, samples, warnings


def safe_frequency_hz(
    lut: Lut, r: NDArray[np.float64], power_limit_w: float, metric: PowerMetric
) -> int | None:
    """The highest GPU frequency at which every eligible batch size is within the limit.

    This is how the first paper fixes the frequency of its baselines: safe irrespective of b.
    Only frequencies where every eligible batch size was measured qualify, since the baselines
    need their times there (a frontier profile measures that column with `baseline_column`).
    """
    power = lut.power(metric)
    rows = np.flatnonzero(~np.isnan(r))
    best: int | None = None
    for f in np.unique(lut.gpu_freqs_hz):
        cells = power[rows, stock_column(lut, int(f))]
        if not np.any(np.isnan(cells)) and bool(np.all(cells <= power_limit_w)):
            best = int(f)
    return best


def stock_column(lut: Lut, gpu_freq_hz: int) -> int:
    """The mode column for a fixed GPU frequency with every other clock at its highest."""
    cols = np.flatnonzero(lut.gpu_freqs_hz == gpu_freq_hz)
    if cols.size == 0:
        profiled = ", ".join(f"{f / 1e6:g}" for f in np.unique(lut.gpu_freqs_hz))
        raise PlanInputError(
            f"baseline frequency {gpu_freq_hz / 1e6:g} MHz is not in the profile"
            f" (profiled MHz: {profiled})"
        )
    return int(cols[-1])


def baseline_frequency_for_limit(
    freqs_by_limit_w: Mapping[float, int], power_limit_w: float
) -> int:
    """The fixed frequency listed for the tightest listed limit that is ≤ the plan's limit."""
    usable = [limit for limit in freqs_by_limit_w if limit <= power_limit_w]
    if not usable:
        listed = ", ".join(f"{w:g} W" for w in sorted(freqs_by_limit_w))
        raise PlanInputError(
            f"no baseline frequency is listed for a limit ≤ {power_limit_w:g} W (listed: {listed})"
        )
    return freqs_by_limit_w[max(usable)]


def _point(
    lut: Lut,
    r: NDArray[np.float64],
    samples: NDArray[np.float64],
    row: int,
    col: int,
    power_limit_w: float,
    metric: PowerMetric,
) -> PlanPoint:
    time_s = float(lut.time_per_sample_s[row, col])
    power_w = float(lut.power(metric)[row, col])
    n_samples = float(samples[row])
    return PlanPoint(
        batch_size=int(lut.batch_sizes[row]),
        **lut.mode_fields(col),
        relative_time=time_s * float(r[row]),
        power_w=power_w,
        time_per_sample_s=time_s,
        r=float(r[row]),
        relative_energy_j=float(lut.mean_power_w[row, col]) * time_s * float(r[row]),
        predicted_seconds=None if math.isnan(n_samples) else time_s * n_samples,
        within_limit=power_w <= power_limit_w,
    )


def _cost(point: PlanPoint, objective: Objective) -> float:
    return point.relative_time if objective is Objective.time else point.relative_energy_j


def _baseline(point: PlanPoint, plan_cost: float, objective: Objective) -> BaselinePoint:
    return BaselinePoint(**point.model_dump(), ratio_to_plan=_cost(point, objective) / plan_cost)


def describe_infeasible(
    lut: Lut, r: NDArray[np.float64], power_limit_w: float, metric: PowerMetric
) -> str:
    """One line naming the limit and the lowest profiled power among eligible batch sizes."""
    power = lut.power(metric)[~np.isnan(r)]
    i, j = np.unravel_index(np.nanargmin(power), power.shape)
    rows = lut.batch_sizes[~np.isnan(r)]
    return (
        f"no profiled point is within the power limit of {power_limit_w:g} W"
        f" ({metric.value} power); the lowest profiled {metric.value} power is"
        f" {float(power[i, j]):.3f} W"
        f" (batch size {rows[i]} at {lut.gpu_freqs_hz[j] / 1e6:g} MHz)"
    )


def plan(
    lut: Lut,
    efficiency: EfficiencyVector,
    power_limit_w: float,
    *,
    metric: PowerMetric = PowerMetric.peak,
    objective: Objective = Objective.time,
    baseline_freq_hz: int | None = None,
    oracle: EfficiencyVector | None = None,
) -> PlanResult:
    """Choose the point, then B1, B2 (and the oracle) for comparison.

    `power_limit_w` may be `math.inf` (no limit). B1/B2 run at `baseline_freq_hz` if given, else
    at the profile's highest frequency that is safe for every batch size.
    """
    if not power_limit_w > 0:
        raise PlanInputError(f"the power limit must be > 0 W, got {power_limit_w}")
    r, samples, warnings = align_efficiency(lut, efficiency)
    choice = select(lut, r, power_limit_w, metric=metric, objective=objective)
    if choice is None:
        raise InfeasibleError(describe_infeasible(lut, r, power_limit_w, metric))
    chosen = _point(lut, r, samples, choice.row, choice.column, power_limit_w, metric)
    plan_cost = _cost(chosen, objective)

    baselines: dict[str, BaselinePoint] = {}
    freq = baseline_freq_hz or safe_frequency_hz(lut, r, power_limit_w, metric)
    if freq is None:
        warnings.append(
            "no GPU frequency keeps every batch size within the limit; B1 and B2 are omitted"
        )
    else:
        col = stock_column(lut, freq)
        rows = np.flatnonzero(~np.isnan(r) & lut.measured[:, col])
        if rows.size == 0:
            warnings.append(f"no eligible batch size is profiled at {freq / 1e6:g} MHz; no B1/B2")
        else:
            b1 = int(rows[-1])
            b2 = int(min(rows, key=lambda i: (r[i], -i)))
            for name, row in (("B1", b1), ("B2", b2)):
                point = _point(lut, r, samples, row, col, power_limit_w, metric)
                baselines[name] = _baseline(point, plan_cost, objective)

    if oracle is not None:
        true_r, true_samples, oracle_warnings = align_efficiency(lut, oracle)
        warnings += [f"oracle: {w}" for w in oracle_warnings]
        best = select(lut, true_r, power_limit_w, metric=metric, objective=objective)
        if best is not None:
            # The oracle is judged on true r on both sides: how far the plan is from the best.
            mine = float(objective_matrix(lut, true_r, objective)[choice.row, choice.column])
            point = _point(lut, true_r, true_samples, best.row, best.column, power_limit_w, metric)
            baselines["oracle"] = _baseline(point, mine, objective)

    feasible = lut.measured & (lut.power(metric) <= power_limit_w) & ~np.isnan(r)[:, None]
    return PlanResult(
        **chosen.model_dump(),
        power_limit_w=None if math.isinf(power_limit_w) else power_limit_w,
        power_metric=metric,
        objective=objective,
        profiled_points=int(lut.measured.sum()),
        feasible_points=int(feasible.sum()),
        baselines=baselines,
        warnings=warnings,
    )


__all__ = [
    "Choice",
    "InfeasibleError",
    "PlanInputError",
    "align_efficiency",
    "baseline_frequency_for_limit",
    "plan",
    "safe_frequency_hz",
    "stock_column",
]
