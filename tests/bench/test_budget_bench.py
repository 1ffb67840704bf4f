"""`edgetrain bench budget`: the site simulation's policies on hand-made jobs, and the CLI's JSON
on twins (simulated)."""

from __future__ import annotations

import json
import math

import numpy as np
from typer.testing import CliRunner

from edgetrain.bench.budget import (
    POLICIES,
    SimJob,
    simulate,
)
from edgetrain.cli import app


def sim_job(name: str, node: int, points: list[tuple[float, float]],
            limit: float = math.inf) -> SimJob:
    power, seconds = (np.array(v, dtype=float) for v in zip(*points, strict=True))
    return SimJob(name, node, "jetson-nano", name, limit, power, seconds)


# Job a gains little from power, b much: an equal split wastes watts on a.
JOBS = [sim_job("a", 0, [(2.0, 100.0), (4.0, 95.0)]),
        sim_job("b", 1, [(2.0, 400.0), (4.0, 150.0)])]
IDLE = {0: 1.0, 1: 1.0}


def test_the_allocator_gives_the_watts_where_they_gain_most() -> None:
    res = {n: simulate(JOBS, 6.0, IDLE, fn) for n, fn in POLICIES.items()}
    assert res["allocator"].sum_tta_s == 100.0 + 150.0
    # 3 W each (2 W points) until a ends at 100 s; then b, a quarter done, gets its 4 W point.
    assert res["equal_split"].sum_tta_s == 100.0 + (100.0 + 0.75 * 150.0)
    # FCFS at own limit: a's 4 W plan first; b's 4 W does not fit beside it, so b waits.
    assert res["fcfs"].sum_tta_s == 95.0 + (95.0 + 150.0)
    for r in res.values():
        assert r.max_planned_w <= 6.0 and r.jobs_succeeded == 2
        assert r.seconds_over_cap_plus_1w == 0.0


def test_a_job_that_never_fits_does_not_count_as_done() -> None:
    big = [sim_job("a", 0, [(9.0, 10.0)]), sim_job("b", 1, [(2.0, 10.0)])]
    r = simulate(big, 5.0, IDLE, POLICIES["allocator"])
    assert r.jobs_succeeded == 1 and math.isinf(r.sum_tta_s)


def test_queueing_on_one_node() -> None:
    jobs = [sim_job("a", 0, [(2.0, 50.0)]), sim_job("b", 0, [(2.0, 70.0)])]
    r = simulate(jobs, 10.0, {0: 1.0}, POLICIES["allocator"])
    assert r.sum_tta_s == 50.0 + 120.0 and r.makespan_s == 120.0


def test_cli_json_on_twins() -> None:
    out = CliRunner().invoke(app, ["bench", "budget", "--jobs", "2", "--nodes", "2", "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout)
    for key in ("jobs", "jobs_succeeded", "cap_w", "sum_tta_ratio_vs_equal_split",
                "makespan_ratio_vs_equal_split", "max_planned_w", "max_measured_w",
                "seconds_over_cap_plus_1w"):
        assert key in result, key
    assert result["simulated"] is True and result["jobs"] == 2
    assert result["max_planned_w"] <= result["cap_w"] + 1e-6
    for policy in ("allocator", "equal_split", "fcfs"):
        assert {"sum_tta_s", "makespan_s"} <= set(result["policies"][policy])
    assert result["sum_tta_ratio_vs_equal_split"] <= 1.0 + 1e-9
    assert result["identical"]["jobs"] == 2
