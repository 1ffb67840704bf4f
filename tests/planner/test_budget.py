"""The site power budget allocator: tables, and properties against brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.api import EfficiencyVector
from edgetrain.planner import Lut
from edgetrain.planner.budget import (
    EPS_W,
    BudgetInputError,
    JobOptions,
    allocate,
    job_options,
    site_draw_w,
)


def job(name: str, points: list[tuple[float, float]], node: str = "", limit: float = math.inf,
        running: bool = False, order: float = 0.0) -> JobOptions:
    power, seconds = zip(*points, strict=True)
    return JobOptions(name, np.array(power), np.array(seconds), limit_w=limit,
                      node=node or f"node-{name}", running=running, order=order)


# A Nano-like job: faster at more power, with diminishing returns.
NANO = [(2.0, 300.0), (3.0, 180.0), (4.0, 130.0), (5.0, 110.0)]


def test_three_jobs_share_nine_watts_evenly_when_identical() -> None:
    jobs = [job(n, NANO) for n in "abc"]
    plan = allocate(jobs, 9.0)
    assert plan.grants() == {"a": 3.0, "b": 3.0, "c": 3.0}
    assert plan.planned_w == 9.0 and plan.sum_seconds == 540.0


def test_the_job_that_gains_most_gets_the_spare_watts() -> None:
    # b gains 200 s from its second watt, a only 20 s: the 1 W spare goes to b.
    a = job("a", [(2.0, 100.0), (3.0, 80.0)])
    b = job("b", [(2.0, 400.0), (3.0, 200.0)])
    plan = allocate([a, b], 5.0)
    assert plan.grants() == {"a": 2.0, "b": 3.0}


def test_own_limit_is_never_exceeded_even_with_spare_power() -> None:
    plan = allocate([job("a", NANO, limit=3.5), job("b", NANO)], 20.0)
    assert plan.grants() == {"a": 3.0, "b": 5.0}


def test_a_job_that_does_not_fit_waits_with_the_numbers() -> None:
    jobs = [job("a", NANO, order=1), job("b", NANO, order=2), job("c", NANO, order=3)]
    plan = allocate(jobs, 5.0)
    by = plan.by_job()
    assert by["a"].watts is not None and by["b"].watts is not None
    assert by["c"].waiting and "needs 2.00 W" in by["c"].reason and "5 W" in by["c"].reason
    assert plan.planned_w <= 5.0


def test_running_jobs_keep_their_place_and_later_arrivals_wait() -> None:
    jobs = [job("new", NANO, order=0), job("old", NANO, running=True, order=5)]
    plan = allocate(jobs, 3.5)
    assert plan.by_job()["new"].waiting and plan.grants()["old"] == 3.0


def test_smaller_later_job_backfills_past_a_larger_one() -> None:
    big = job("big", [(6.0, 100.0)], order=1)
    small = job("small", [(2.0, 100.0)], order=2)
    plan = allocate([job("run", NANO, running=True), big, small], 7.0)
    assert plan.by_job()["big"].waiting and plan.grants()["small"] == 2.0


def test_idle_nodes_count_against_the_cap_until_a_job_runs_there() -> None:
    idle = {"node-a": 1.0, "node-b": 1.0, "spare": 1.5}
    plan = allocate([job("a", NANO), job("b", NANO)], 9.0, idle)
    # spare's idle 1.5 W stays; a and b's node idle is inside their points.
    assert plan.idle_w == 1.5
    assert plan.grants() == {"a": 3.0, "b": 4.0} or plan.grants() == {"a": 4.0, "b": 3.0}
    assert plan.planned_w == 8.5


def test_cap_below_idle_admits_nobody() -> None:
    plan = allocate([job("a", NANO)], 1.0, {"node-a": 0.5, "other": 0.9})
    assert plan.by_job()["a"].waiting and plan.planned_w == pytest.approx(1.4)


def test_no_point_within_own_limit_waits_with_that_reason() -> None:
    plan = allocate([job("a", NANO, limit=1.0)], 10.0)
    assert plan.by_job()["a"].waiting and "own limit of 1 W" in plan.by_job()["a"].reason


def test_makespan_objective_evens_out_the_slowest() -> None:
    fast = job("fast", [(2.0, 50.0), (4.0, 40.0)])
    slow = job("slow", [(2.0, 400.0), (4.0, 380.0)])
    summed = allocate([fast, slow], 6.0)
    span = allocate([fast, slow], 6.0, objective="makespan")
    assert span.makespan_seconds == 380.0 and span.grants()["slow"] == 4.0
    assert summed.sum_seconds <= span.sum_seconds


@pytest.mark.parametrize("cap", [0.0, -1.0, math.nan])
def test_bad_cap_is_refused(cap: float) -> None:
    with pytest.raises(BudgetInputError, match="cap must be > 0"):
        allocate([job("a", NANO)], cap)


def test_bad_job_inputs_are_refused() -> None:
    with pytest.raises(BudgetInputError, match="unique"):
        allocate([job("a", NANO), job("a", NANO)], 9.0)
    with pytest.raises(BudgetInputError, match="one length"):
        JobOptions("x", np.array([1.0, 2.0]), np.array([1.0]))


def test_job_options_from_a_lut_and_efficiency_vector() -> None:
    lut = Lut.from_grid([16, 64], [400_000_000, 900_000_000],
                        np.array([[0.004, 0.002], [0.003, 0.0015]]),
                        np.array([[2.0, 3.5], [2.5, 4.5]]))
    eff = EfficiencyVector.from_samples(model="m", dataset="d", target_accuracy=0.9,
                                        batch_sizes=[16, 64],
                                        samples_to_accuracy=[10_000.0, 20_000.0])
    opts = job_options("j", lut, eff, limit_w=4.0, node="n1")
    assert opts.labels == ((16, 400_000_000), (16, 900_000_000), (64, 400_000_000),
                           (64, 900_000_000))
    assert opts.seconds.tolist() == pytest.approx([40.0, 20.0, 60.0, 30.0])
    assert opts.eligible.tolist() == [0, 1, 2]  # 4.5 W is above its own 4 W


# --- properties -------------------------------------------------------------------------

powers = st.sampled_from([1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.5])
secs = st.sampled_from([50.0, 80.0, 100.0, 130.0, 200.0, 260.0, 400.0])


@st.composite
def sites(draw: st.DrawFn) -> tuple[list[JobOptions], float, dict[str, float]]:
    n_jobs = draw(st.integers(1, 4))
    nodes = [f"n{i}" for i in range(draw(st.integers(n_jobs, n_jobs + 2)))]
    idle = {n: draw(st.sampled_from([0.0, 0.5, 1.0])) for n in nodes}
    jobs = []
    for i in range(n_jobs):
        k = draw(st.integers(1, 4))
        pts = [(draw(powers), draw(secs)) for _ in range(k)]
        limit = draw(st.sampled_from([math.inf, 3.0, 5.0]))
        jobs.append(job(f"j{i}", pts, node=nodes[i], limit=limit, running=draw(st.booleans()),
                        order=float(draw(st.integers(0, 9)))))
    cap = draw(st.sampled_from([2.0, 4.0, 6.0, 9.0, 12.0, 20.0]))
    return jobs, cap, idle


def brute_force_sum(jobs: list[JobOptions], available: float) -> float | None:
    """The smallest Σ seconds over every combination of eligible points within `available`."""
    best: float | None = None
    for combo in itertools.product(*[j.eligible.tolist() for j in jobs]):
        p = sum(float(j.power_w[k]) for j, k in zip(jobs, combo, strict=True))
        if p <= available + EPS_W:
            t = sum(float(j.seconds[k]) for j, k in zip(jobs, combo, strict=True))
            best = t if best is None else min(best, t)
    return best


@settings(max_examples=300, deadline=None)
@given(sites(), st.sampled_from(["sum", "makespan"]))
def test_planned_draw_within_cap_and_own_limits(
    site: tuple[list[JobOptions], float, dict[str, float]], objective: str
) -> None:
    jobs, cap, idle = site
    plan = allocate(jobs, cap, idle, objective=objective)  # type: ignore[arg-type]
    by = plan.by_job()
    admitted = [j for j in jobs if not by[j.name].waiting]
    if admitted:
        assert plan.planned_w <= cap + 1e-6
    assert plan.planned_w == pytest.approx(
        site_draw_w(plan.grants(), {j.name: j.node for j in jobs}, idle))
    for j in jobs:
        a = by[j.name]
        if a.watts is not None:
            assert a.watts <= j.limit_w and a.point is not None
            assert a.watts == j.power_w[a.point] and a.seconds == j.seconds[a.point]


@settings(max_examples=300, deadline=None)
@given(sites())
def test_sum_objective_is_optimal_against_brute_force(
    site: tuple[list[JobOptions], float, dict[str, float]]
) -> None:
    jobs, cap, idle = site
    plan = allocate(jobs, cap, idle)
    by = plan.by_job()
    admitted = [j for j in jobs if not by[j.name].waiting]
    best = brute_force_sum(admitted, cap - plan.idle_w)
    if admitted:
        assert best is not None and plan.sum_seconds == pytest.approx(best)
    # Admission is maximal: no waiting job's cheapest point would still fit.
    for j in jobs:
        if by[j.name].waiting and math.isfinite(j.min_power_w):
            grants = {a.job: a.watts for a in plan.allocations if not a.waiting}
            mins = {n: min(float(x.power_w[x.eligible].min()), float("inf"))
                    for x in admitted for n in [x.name] if n in grants}
            mins[j.name] = j.min_power_w
            assert site_draw_w(mins, {x.name: x.node for x in jobs}, idle) > cap


