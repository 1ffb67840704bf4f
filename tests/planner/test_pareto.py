"""Pareto front against a quadratic reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.planner import pareto_front

values = st.lists(
    st.tuples(st.sampled_from([1.0, 2.0, 3.0, 4.0, np.nan]), st.sampled_from([1.0, 2.0, 3.0, 5.0])),
    min_size=0,
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_front_matches_dominance_definition(pairs: list[tuple[float, float]]) -> None:
    t = np.array([a for a, _ in pairs], dtype=np.float64)
    p = np.array([b for _, b in pairs], dtype=np.float64)
    front = set(pareto_front(t, p).tolist())
    for i in range(len(pairs)):
        if np.isnan(t[i]):
            assert i not in front
            continue
        dominated = any(
            not np.isnan(t[k]) and t[k] <= t[i] and p[k] <= p[i] and (t[k] < t[i] or p[k] < p[i])
            for k in range(len(pairs))
        )
        duplicate_before = any(t[k] == t[i] and p[k] == p[i] for k in range(i))
        assert (i in front) == (not dominated and not duplicate_before)


def test_front_is_ordered_by_power() -> None:
    t = np.array([[5.0, 3.0, 2.0], [4.0, 3.5, 1.0]])  # (3.5 s, 3 W) is dominated
    p = np.array([[1.0, 2.0, 4.0], [1.5, 3.0, 6.0]])
    idx = pareto_front(t, p)
    assert p.ravel()[idx].tolist() == sorted(p.ravel()[idx].tolist())
    assert idx.tolist() == [0, 3, 1, 2, 5]
