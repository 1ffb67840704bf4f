"""N read where the accuracy curve crosses the target, and N merged over seeds."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgetrain.api.efficiency import geometric_mean, merged_samples
from edgetrain.api.training import crossing_samples


def test_the_crossing_is_interpolated_between_evaluations() -> None:
    curve = [(1024, 0.5), (2048, 0.7), (3072, 0.9), (4096, 0.95)]
    assert crossing_samples(curve, 0.8) == pytest.approx(2048 + 1024 * 0.5)
    assert crossing_samples(curve, 0.9) == pytest.approx(3072)
    assert crossing_samples(curve, 0.96) is None
    # At the first evaluation there is nothing before it: its own count.
    assert crossing_samples(curve, 0.4) == 1024.0
    # A dip after the crossing does not matter; the first crossing does.
    assert crossing_samples([(10, 0.1), (20, 0.9), (30, 0.2), (40, 0.95)], 0.5) == pytest.approx(
        10 + 10 * 0.4 / 0.8
    )


@given(
    st.lists(
        st.tuples(st.integers(1, 10_000), st.floats(0.0, 1.0)), min_size=1, max_size=30
    ).map(lambda xs: sorted({s: a for s, a in xs}.items())),
    st.floats(0.01, 1.0),
)
def test_the_crossing_lies_between_the_grid_reading_and_the_evaluation_before(
    curve: list[tuple[int, float]], target: float
) -> None:
    got = crossing_samples(curve, target)
    first = next((i for i, (_s, a) in enumerate(curve) if a >= target), None)
    if first is None:
        assert got is None
        return
    assert got is not None
    low = curve[first - 1][0] if first else curve[first][0]
    assert low <= got <= curve[first][0]


def test_seeds_merge_by_geometric_mean_or_the_median_with_a_miss() -> None:
    assert merged_samples([1000.0, 4000.0]) == pytest.approx(2000.0)
    assert merged_samples([1234.5]) == 1234.5  # one run: exactly itself
    assert merged_samples([1000.0, None, 3000.0]) == 3000.0  # a miss counts as never
    assert merged_samples([1000.0, None]) is None
    assert geometric_mean([None, 4.0, 9.0]) == pytest.approx(6.0)
    assert geometric_mean([None, math.nan]) is None
