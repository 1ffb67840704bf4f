"""Pareto front of (time, power) over profile points."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def pareto_front(
    time_per_sample_s: NDArray[np.float64], power_w: NDArray[np.float64]
) -> NDArray[np.int64]:
    """Indices of points no other point beats on both time and power, by ascending power.

    NaN points are ignored; of exact duplicates only the first is kept.
    """
    t = np.asarray(time_per_sample_s, dtype=np.float64).ravel()
    p = np.asarray(power_w, dtype=np.float64).ravel()
    valid = np.flatnonzero(~(np.isnan(t) | np.isnan(p)))
    if valid.size == 0:
        return np.empty(0, dtype=np.int64)
    order = valid[np.lexsort((t[valid], p[valid]))]  # by power, then time
    times = t[order]
    # A point is on the front iff it is strictly faster than everything at lower-or-equal power.
    best_before = np.concatenate(([np.inf], np.minimum.accumulate(times)[:-1]))
    return order[times < best_before].astype(np.int64)
