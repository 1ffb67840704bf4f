"""`edgetrain bench budget`: one site's jobs under one cap, three policies, on twins (simulated).

Jobs are the paper bench's workloads on its boards (twin truth LUTs over the batch sizes and each
board's GPU clocks) with the samples to the target per batch size that the paper bench measured
(`docs/benchmarks/paper/cpu.json`, used as N(b) without training again). Each job is bound to a
node (job i on node i mod M, node k of board k mod 3); one job per node at a time. An event
simulation runs every policy on the same jobs:

- `allocator`: `planner.budget.allocate` at every start and end (summed time-to-accuracy of what
  is left), lowering before raising;
- `equal_split`: the cap less idle nodes split evenly among the nodes' current jobs, each at its
  best point within min(share, own limit); jobs whose cheapest point exceeds the share wait;
- `fcfs`: first come first served at each job's own-limit plan while the plans fit the cap,
  queueing the rest; a started job is never re-planned.

A job's time-to-accuracy is its completion time from t = 0 (every job is submitted then).
Site power is the twins' peak power of each running point plus the idle draw of idle nodes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from edgetrain.planner import Lut
from edgetrain.planner.budget import JobOptions, allocate

BOARDS = ("jetson-nano", "jetson-tx2-nx", "jetson-orin-nano")
DEFAULT_RUN = Path(__file__).resolve().parents[2] / "docs/benchmarks/paper/cpu.json"
EPS = 1e-9


@dataclass(frozen=True)
class SimJob:
    """A job of the bench: its truth LUT's points as (power W, seconds to target)."""

    name: str
    node: int
    board: str
    label: str
    limit_w: float
    power_w: np.ndarray[Any, np.dtype[np.float64]]
    seconds: np.ndarray[Any, np.dtype[np.float64]]

    def best_within(self, watts: float) -> int | None:
        """The fastest point at or below `watts` and its own limit."""
        ok = np.flatnonzero(self.power_w <= min(watts, self.limit_w) + EPS)
        return None if ok.size == 0 else int(ok[np.argmin(self.seconds[ok])])

    @property
    def min_power_w(self) -> float:
        """Its cheapest point within its own limit."""
        ok = self.power_w[self.power_w <= self.limit_w + EPS]
        return float(ok.min()) if ok.size else math.inf


class PolicyResult(BaseModel):
    """One policy's outcome on the site (simulated)."""

    sum_tta_s: float
    makespan_s: float
    jobs_succeeded: int
    max_planned_w: float
    max_measured_w: float
    seconds_over_cap_plus_1w: float
    replans: int
    timeline: list[tuple[float, float]] = []  # (t, site W) after each event


@dataclass
class _State:
    done: dict[str, float] = field(default_factory=dict)  # finish time
    left: dict[str, float] = field(default_factory=dict)  # fraction still to train
    point: dict[str, int] = field(default_factory=dict)  # running jobs' points


Policy = Callable[[list[SimJob], dict[str, int], float, dict[int, float]], dict[str, int]]


def _heads(jobs: Sequence[SimJob], state: _State) -> list[SimJob]:
    """Per node, the job running there, else the earliest unfinished one."""
    out: dict[int, SimJob] = {}
    for j in jobs:
        if j.name in state.done:
            continue
        if j.node not in out or (j.name in state.point and out[j.node].name not in state.point):
            out[j.node] = j
    return list(out.values())


def _site_w(jobs: Sequence[SimJob], points: dict[str, int], idle: dict[int, float]) -> float:
    by = {j.name: j for j in jobs}
    busy = {by[n].node for n in points}
    return sum(w for k, w in idle.items() if k not in busy) + sum(
        float(by[n].power_w[p]) for n, p in points.items())


def allocator_policy(heads: list[SimJob], running: dict[str, int], cap_w: float,
                     idle: dict[int, float], left: dict[str, float] | None = None,
                     objective: str = "sum") -> dict[str, int]:
    """The operator's allocator on what each job has left."""
    left = left or {}
    opts = [JobOptions(j.name, j.power_w, j.seconds * left.get(j.name, 1.0), limit_w=j.limit_w,
                       node=str(j.node), running=j.name in running, order=float(j.node))
            for j in heads]
    plan = allocate(opts, cap_w, {str(k): w for k, w in idle.items()},
                    objective=objective)  # type: ignore[arg-type]
    return {a.job: int(a.point) for a in plan.allocations if a.point is not None}


def equal_split_policy(heads: list[SimJob], running: dict[str, int], cap_w: float,
                       idle: dict[int, float], left: dict[str, float] | None = None,
                       objective: str = "sum") -> dict[str, int]:
    """The cap less idle nodes, split evenly; the latest jobs wait until the share fits."""
    active = sorted(heads, key=lambda j: (j.name not in running, j.node))
    while active:
        busy = {j.node for j in active}
        share = (cap_w - sum(w for k, w in idle.items() if k not in busy)) / len(active)
        points = {j.name: j.best_within(share) for j in active}
        if all(p is not None for p in points.values()):
            return {n: p for n, p in points.items() if p is not None}
        active = active[:-1]
    return {}


def fcfs_policy(heads: list[SimJob], running: dict[str, int], cap_w: float,
                idle: dict[int, float], left: dict[str, float] | None = None,
                objective: str = "sum") -> dict[str, int]:
    """Running jobs keep their plan; waiting ones start at their own-limit plan if it fits."""
    out = {n: p for n, p in running.items() if any(j.name == n for j in heads)}
    for j in sorted(heads, key=lambda j: j.node):
        if j.name in out:
            continue
        p = j.best_within(math.inf)
        if p is None:
            continue
        trial = {**out, j.name: p}
        if _site_w(heads, trial, idle) <= cap_w + EPS:
            out = trial
    return out


POLICIES: dict[str, Callable[..., dict[str, int]]] = {
    "allocator": allocator_policy, "equal_split": equal_split_policy, "fcfs": fcfs_policy}


def simulate(jobs: list[SimJob], cap_w: float, idle: dict[int, float],
             policy: Callable[..., dict[str, int]], objective: str = "sum") -> PolicyResult:
    """Run the site to the end (or until nothing can run) under one policy."""
    state = _State(left={j.name: 1.0 for j in jobs})
    now, replans = 0.0, 0
    timeline: list[tuple[float, float]] = []
    planned_max = measured_max = over_s = 0.0
    while True:
        heads = _heads(jobs, state)
        if not heads:
            break
        new = policy(heads, dict(state.point), cap_w, idle, state.left, objective)
        replans += sum(1 for n, p in new.items() if n in state.point and state.point[n] != p)
        # Lowering lands before raising: the site's draw moves monotonically between the two.
        before = _site_w(jobs, state.point, idle)
        state.point = new
        after = _site_w(jobs, new, idle)
        planned_max = max(planned_max, after)
        measured_max = max(measured_max, before, after)
        timeline.append((now, after))
        if not new:
            break
        by = {j.name: j for j in jobs}
        rates = {n: 1.0 / float(by[n].seconds[p]) for n, p in new.items()}
        step, first = min((state.left[n] / r, n) for n, r in rates.items())
        if after > cap_w + 1.0:
            over_s += step
        now += step
        for n, r in rates.items():
            state.left[n] = max(0.0, state.left[n] - r * step)
        for n in list(new):
            if state.left[n] <= 1e-9 or n == first:
                state.done[n] = now
                state.point.pop(n, None)
    timeline.append((now, _site_w(jobs, {}, idle)))
    finished = list(state.done.values())
    return PolicyResult(
        sum_tta_s=sum(finished) if len(finished) == len(jobs) else math.inf,
        makespan_s=max(finished, default=0.0), jobs_succeeded=len(finished),
        max_planned_w=round(planned_max, 3), max_measured_w=round(measured_max, 3),
        seconds_over_cap_plus_1w=over_s, replans=replans, timeline=timeline)


def site_jobs(n_jobs: int, n_nodes: int, identical: bool = False,
              run_json: Path = DEFAULT_RUN) -> tuple[list[SimJob], dict[int, float]]:
    """The default mix: the paper bench's workloads × its measured targets × boards; or n copies
    of the first job (identical). Returns the jobs and each node's idle draw."""
    from edgetrain.bench.paper.config import WorkloadConfig, board_limits_w
    from edgetrain.bench.paper.evaluate import truth_lut, twin_shape
    from edgetrain.device.sim import BOARDS as TWINS
    from edgetrain.device.sim.physics import idle_power

    run = json.loads(run_json.read_text())
    workloads = {w["model"]: WorkloadConfig.model_validate(w) for w in run["config"]["workloads"]}
    targets: list[tuple[WorkloadConfig, str, list[float | None]]] = []
    for est in run["estimates"]:
        w = workloads.get(est["model"])
        if w is None or est.get("seed", 0) != 0:
            continue
        targets.append((w, f"{est['dataset']}@{est['target_accuracy']:g}",
                        est["samples_to_accuracy"]))
    node_board = {k: BOARDS[k % len(BOARDS)] for k in range(n_nodes)}
    luts: dict[tuple[str, str], Lut] = {}
    jobs: list[SimJob] = []
    for i in range(n_jobs):
        w, target, samples = targets[0 if identical else i % len(targets)]
        node = 0 if identical and n_nodes == 1 else i % n_nodes
        board = node_board[node] if not identical else BOARDS[0]
        key = (board, w.model)
        if key not in luts:
            model, shape, classes = twin_shape(w)
            luts[key] = truth_lut(board, model, shape, classes, w.batch_sizes)
        lut = luts[key]
        n = np.array([math.nan if s is None else float(s) for s in samples])
        rows, cols = np.nonzero(lut.measured & ~np.isnan(n)[:, None])
        limit = board_limits_w(board, w.batch_sizes)[1] or math.inf  # the middle paper limit
        jobs.append(SimJob(
            name=f"job{i}", node=node, board=board, label=f"{w.label} {target} on {board}",
            limit_w=float(limit), power_w=lut.peak_power_w[rows, cols],
            seconds=lut.time_per_sample_s[rows, cols] * n[rows]))
    idle = {k: round(idle_power(TWINS[b]).total_w, 3) for k, b in node_board.items()}
    if identical:
        idle = {k: round(idle_power(TWINS[BOARDS[0]]).total_w, 3) for k in range(n_nodes)}
    return jobs, idle


class BudgetBench(BaseModel):
    """The bench's one JSON object (simulated)."""

    simulated: bool = True
    jobs: int
    nodes: int
    cap_w: float
    jobs_succeeded: int
    sum_tta_ratio_vs_equal_split: float
    makespan_ratio_vs_equal_split: float
    max_planned_w: float
    max_measured_w: float
    seconds_over_cap_plus_1w: float
    policies: dict[str, PolicyResult]
    identical: dict[str, Any] = {}
    sweep: list[SweepRow] = []
    mix: list[str] = []


#: Where the default cap sits between the nodes' first jobs' cheapest points (0) and their
#: own-limit plans (1): a tight site, where sharing matters (the sweep shows the rest).
DEFAULT_CAP_FRACTION = 0.3
SWEEP = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)


def cap_at_fraction(jobs: Sequence[SimJob], idle: dict[int, float], fraction: float) -> float:
    """A cap `fraction` of the way from every node's first job at its cheapest point to all of
    them at their own-limit plans."""
    first = {j.node: j for j in reversed(jobs)}
    rest = sum(w for k, w in idle.items() if k not in first)
    low = sum(j.min_power_w for j in first.values()) + rest
    high = sum(float(j.power_w[j.best_within(math.inf) or 0]) for j in first.values()) + rest
    return round(low + fraction * (high - low), 2)


def default_cap_w(jobs: Sequence[SimJob], idle: dict[int, float]) -> float:
    """The bench's default cap (DEFAULT_CAP_FRACTION)."""
    return cap_at_fraction(jobs, idle, DEFAULT_CAP_FRACTION)


class SweepRow(BaseModel):
    """One cap of the sweep (simulated)."""

    fraction: float
    cap_w: float
    sum_tta_s: dict[str, float]
    makespan_s: dict[str, float]
    jobs_succeeded: dict[str, int]


def run_case(jobs: list[SimJob], idle: dict[int, float], cap_w: float) -> dict[str, Any]:
    """Every policy on the same jobs; the allocator's figures and the ratios."""
    res = {name: simulate(jobs, cap_w, idle, fn) for name, fn in POLICIES.items()}
    alloc, equal = res["allocator"], res["equal_split"]
    return {
        "jobs": len(jobs), "nodes": len(idle), "cap_w": cap_w,
        "jobs_succeeded": alloc.jobs_succeeded,
        "sum_tta_ratio_vs_equal_split": round(alloc.sum_tta_s / equal.sum_tta_s, 4),
        "makespan_ratio_vs_equal_split": round(alloc.makespan_s / equal.makespan_s, 4),
        "max_planned_w": alloc.max_planned_w, "max_measured_w": alloc.max_measured_w,
        "seconds_over_cap_plus_1w": alloc.seconds_over_cap_plus_1w,
        "policies": res,
    }


def bench_budget(n_jobs: int = 6, n_nodes: int = 3, cap_w: float | None = None) -> BudgetBench:
    """The default mix and the identical-jobs case."""
    jobs, idle = site_jobs(n_jobs, n_nodes)
    cap = cap_w if cap_w is not None else default_cap_w(jobs, idle)
    main = run_case(jobs, idle, cap)
    same, same_idle = site_jobs(n_jobs, n_nodes, identical=True)
    same_cap = cap_w if cap_w is not None else default_cap_w(same, same_idle)
    ident = run_case(same, same_idle, same_cap)
    for p in ident["policies"].values():
        p.timeline = []
    sweep = []
    for fraction in SWEEP:
        c = cap_at_fraction(jobs, idle, fraction)
        res = {name: simulate(jobs, c, idle, fn) for name, fn in POLICIES.items()}
        sweep.append(SweepRow(fraction=fraction, cap_w=c,
                              sum_tta_s={k: v.sum_tta_s for k, v in res.items()},
                              makespan_s={k: v.makespan_s for k, v in res.items()},
                              jobs_succeeded={k: v.jobs_succeeded for k, v in res.items()}))
    return BudgetBench(**main, identical={k: v for k, v in ident.items()}, sweep=sweep,
                       mix=[f"{j.name}: {j.label}, own limit {j.limit_w:.2f} W, node {j.node}"
                            for j in jobs])


def plot_budget(result: BudgetBench, path: Path) -> None:
    """Left: summed time-to-accuracy per policy over the cap sweep; right: the allocator's site
    power over time against the cap (simulated)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    caps = [r.cap_w for r in result.sweep]
    for name in POLICIES:
        ys = [r.sum_tta_s[name] / 3600 if math.isfinite(r.sum_tta_s[name]) else math.nan
              for r in result.sweep]
        left.plot(caps, ys, marker="o", label=name.replace("_", " "))
    left.axvline(result.cap_w, color="grey", linestyle=":", label="default cap")
    left.set_xlabel("site cap (W)")
    left.set_ylabel("summed time-to-accuracy (h)")
    left.set_title(f"{result.jobs} jobs on {result.nodes} nodes (simulated)")
    left.legend()
    for name, res in result.policies.items():
        ts = [t / 3600 for t, _ in res.timeline]
        ws = [w for _, w in res.timeline]
        right.step(ts, ws, where="post", label=name.replace("_", " "))
    right.axhline(result.cap_w, color="red", linestyle="--", label="cap")
    right.set_xlabel("time (h)")
    right.set_ylabel("planned site power (W)")
    right.set_title("site power at the default cap (simulated)")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
