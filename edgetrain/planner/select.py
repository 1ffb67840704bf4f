"""Selection: the feasible (batch size, mode) with the smallest predicted time or energy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from edgetrain.api.plan import Objective, PowerMetric
from edgetrain.planner.lut import Lut


@dataclass(frozen=True)
class Choice:
    """A selected LUT cell and its objective value."""

    row: int
    column: int
    objective: float


def objective_matrix(
    lut: Lut,
    r: NDArray[np.float64],
    objective: Objective,
    rows: NDArray[np.int64] | None = None,
) -> NDArray[np.float64]:
    """Predicted cost per cell: time × r, or mean power × time × r (NaN where unmeasured)."""
    # Index only when a subset is asked for: a fancy-index copy of a 20,000-mode LUT costs more
    # than the selection itself.
    idx: slice | NDArray[np.int64] = (
        slice(None) if rows is None or rows.size == lut.batch_sizes.size else rows
    )
    cost = lut.time_per_sample_s[idx] * r[idx, None]
    if objective is Objective.energy:
        cost = lut.mean_power_w[idx] * cost
    return cost


def _best(candidates: list[Choice]) -> Choice | None:
    # Smallest objective; ties go to the larger batch (higher row), then the lower mode (column).
    if not candidates:
        return None
    return min(candidates, key=lambda c: (c.objective, -c.row, c.column))


def _scan(
    lut: Lut,
    rows: NDArray[np.int64],
    r: NDArray[np.float64],
    power_limit_w: float,
    metric: PowerMetric,
    objective: Objective,
) -> list[Choice]:
    """Masked argmin per row over every measured, feasible cell."""
    if rows.size == 0:
        return []
    cost = objective_matrix(lut, r, objective, rows)
    power = lut.power(metric)
    with np.errstate(invalid="ignore"):
        feasible = (power if rows.size == power.shape[0] else power[rows]) <= power_limit_w
    cost = np.where(feasible & ~np.isnan(cost), cost, np.inf)
    cols = np.argmin(cost, axis=1)  # first minimum: the lowest mode among ties
    best = cost[np.arange(rows.size), cols]
    return [
        Choice(int(rows[k]), int(cols[k]), float(best[k]))
        for k in np.flatnonzero(np.isfinite(best))
    ]


def select(
    lut: Lut,
    r: NDArray[np.float64],
    power_limit_w: float,
    *,
    metric: PowerMetric = PowerMetric.peak,
    objective: Objective = Objective.time,
    fast_path: bool = True,
) -> Choice | None:
    """Argmin of the objective over cells with power ≤ limit; rows with NaN r are excluded.

    The fast path is the paper's Algorithm 1 (Eq. 4): on a batch-size row where power rises and
    time falls with the mode, the highest feasible mode is found by binary search. Other rows, and
    the energy objective, are scanned, so the result always equals the exhaustive argmin.
    """
    r = np.asarray(r, dtype=np.float64)
    if r.shape != lut.batch_sizes.shape:
        raise ValueError(f"r has shape {r.shape}, the LUT has {lut.batch_sizes.size} batch sizes")
    eligible = np.flatnonzero(~np.isnan(r))
    if not fast_path or objective is Objective.energy:
        return _best(_scan(lut, eligible, r, power_limit_w, metric, objective))

    monotone = lut.monotone_rows(metric)
    candidates: list[Choice] = []
    scan_rows: list[int] = []
    for i in eligible:
        row = monotone[i]
        if row is None:
            scan_rows.append(int(i))
            continue
        k = int(np.searchsorted(row.power_w, power_limit_w, side="right")) - 1
        if k < 0:
            continue
        r_i = r[i]
        value = float(row.time_per_sample_s[k] * r_i)
        # Rounding of t·r can tie two strictly falling times; the lower mode wins ties.
        while k > 0 and float(row.time_per_sample_s[k - 1] * r_i) == value:
            k -= 1
        candidates.append(Choice(int(i), int(row.columns[k]), value))
    candidates += _scan(
        lut, np.array(scan_rows, dtype=np.int64), r, power_limit_w, metric, objective
    )
    return _best(candidates)
