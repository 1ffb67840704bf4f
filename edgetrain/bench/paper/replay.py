"""Replaying recurring sequences fast: a cell's profile reduced to per-size costs, and one policy
run over a sequence of target draws (numpy; the planner's own posterior and gate).

`plan()` picks argmin over (b, mode) of `T_profile(b, mode) × r_b` within the limit. Per size, the
best mode does not depend on r, so a profile reduces to `plan_cost[b]` (its best feasible time
per sample, the mode `select` picks) and the truth at that mode; a plan is then the argmin over b
of `plan_cost × r` (ties to the larger b, as `select`). `tests/bench/paper/test_replay.py` checks
this against `plan()` and the job's own path (`planner.learn`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from edgetrain.api.plan import PowerMetric
from edgetrain.api.profile import ProfilePoint
from edgetrain.bench.paper.config import Policy
from edgetrain.planner import Lut, select
from edgetrain.planner.gate import GateSettings, gate, gated_r
from edgetrain.planner.history import Chooser, Posterior, choose_r, posterior
from edgetrain.planner.learn import noise_shape
from edgetrain.planner.tilt import TiltPrior


@dataclass(frozen=True)
class CellCosts:
    """One (board, limit, profile): per batch size, what a plan there costs and truly takes."""

    batch_sizes: NDArray[np.int64]
    plan_cost: NDArray[np.float64]  # the profile's time per sample at the mode select picks
    true_time: NDArray[np.float64]  # the truth's time per sample at that mode
    freq_hz: NDArray[np.int64]  # that mode's GPU clock (0: none feasible)
    oracle_time: NDArray[np.float64]  # the truth's best time per sample within the limit


def cell_costs(truth: Lut, points: Sequence[ProfilePoint], limit_w: float,
               metric: PowerMetric) -> CellCosts:  # fmt: skip
    """A profile and the truth reduced to per-size costs (NaN: nothing feasible)."""
    lut = Lut.from_points(list(points))
    bs = [int(b) for b in truth.batch_sizes]
    plan_cost, true_time, freq, oracle = [], [], [], []
    for i, b in enumerate(bs):
        r = np.where(lut.batch_sizes == b, 1.0, np.nan)
        got = select(lut, r, limit_w, metric=metric)
        if got is None:
            plan_cost.append(np.nan)
            true_time.append(np.nan)
            freq.append(0)
        else:
            f = int(lut.gpu_freqs_hz[got.column])
            j = int(np.flatnonzero(truth.gpu_freqs_hz == f)[0])
            plan_cost.append(float(lut.time_per_sample_s[got.row, got.column]))
            true_time.append(float(truth.time_per_sample_s[i, j]))
            freq.append(f)
        r_true = np.where(truth.batch_sizes == b, 1.0, np.nan)
        best = select(truth, r_true, limit_w, metric=metric, fast_path=False)
        oracle.append(np.nan if best is None else float(truth.time_per_sample_s[i, best.column]))
    return CellCosts(np.array(bs), np.array(plan_cost), np.array(true_time),
                     np.array(freq, dtype=np.int64), np.array(oracle))  # fmt: skip


def pick(cost: NDArray[np.float64], r: NDArray[np.float64]) -> int | None:
    """The row `plan()` picks: argmin of cost × r over finite values, ties to the larger b."""
    value = cost * r
    rows = np.flatnonzero(np.isfinite(value))
    if rows.size == 0:
        return None
    return int(min(rows, key=lambda i: (float(value[i]), -int(i))))


@dataclass(frozen=True)
class Draw:
    """One seed's N_target(b) on the cell's batch sizes (NaN: missed) and B_simple (NaN: none)."""

    samples: NDArray[np.float64]
    noise_scale: NDArray[np.float64] | None = None


@dataclass(frozen=True)
class Job:
    """Job k of a replayed sequence."""

    k: int
    batch_size: int | None
    gpu_freq_hz: int | None
    observed: float | None
    over_oracle: float | None
    static_over_oracle: float | None  # job 1's plan judged on this draw
    explored: bool


def judge(cell: CellCosts, row: int | None, target: NDArray[np.float64]) -> float | None:
    """True TTA of the plan at `row` over the oracle's, on this draw (None: missed)."""
    if row is None:
        return None
    tta = float(cell.true_time[row] * target[row])
    totals = cell.oracle_time * target
    finite = totals[np.isfinite(totals)]
    if finite.size == 0 or not math.isfinite(tta):
        return None
    return tta / float(finite.min())


def run_sequence(
    policy: Policy,
    cell: CellCosts,
    proxy: NDArray[np.float64],
    targets: Sequence[Draw],
    *,
    proxy_noise: NDArray[np.float64] | None = None,
    tilt: TiltPrior | None = None,
    budget_samples: float,
    rng: np.random.Generator | None = None,
) -> list[Job]:
    """Jobs 1 … len(targets) of one sequence: each plans from the proxy and the observations of
    the jobs before it (bandit feedback: its draw's N at the size it ran, and its noise scale),
    and is judged on its own draw. `proxy`: N on the cell's batch sizes (NaN: never reached)."""
    rows = np.flatnonzero(np.isfinite(proxy) & (proxy > 0))
    if rows.size == 0:
        return []
    hyper = policy.hyper(tilt)
    sizes = [int(b) for b in cell.batch_sizes[rows]]
    cost = cell.plan_cost[rows]
    scales = None if proxy_noise is None else [
        None if not math.isfinite(v) else float(v) for v in proxy_noise[rows]]  # fmt: skip
    post = posterior(sizes, proxy[rows].tolist(), [], hyper)
    # Without learning, every job plans from the proxy's r (no prior tilt either).
    first = pick(cost, post.r() if policy.learn else _proxy_r(post))
    static_row = None if first is None else int(rows[first])
    settings = policy.gate_settings()
    observations: list[tuple[int, float]] = []
    noises: list[tuple[int, float | None]] = []
    spent = 0.0
    jobs: list[Job] = []
    for k, draw in enumerate(targets, 1):
        explored = False
        if not policy.learn or not observations:
            r = post.r() if policy.learn else _proxy_r(post)
        else:
            r, explored, extra = _learned_r(policy, post, cost, k, spent, settings, rng)
            spent += extra
        local = pick(cost, r)
        row = None if local is None else int(rows[local])
        observed = None if row is None else draw.samples[row]
        jobs.append(Job(
            k=k,
            batch_size=None if row is None else int(cell.batch_sizes[row]),
            gpu_freq_hz=None if row is None else int(cell.freq_hz[row]),
            observed=None if observed is None or not math.isfinite(observed) else float(observed),
            over_oracle=judge(cell, row, draw.samples),
            static_over_oracle=judge(cell, static_row, draw.samples),
            explored=explored,
        ))  # fmt: skip
        if local is None or row is None or not policy.learn:
            continue
        # A miss is censored at the budget: a lower bound kept as if exact (the safe side).
        n = draw.samples[row]
        n = float(n) if math.isfinite(n) else budget_samples
        observations.append((sizes[local], n))
        noise = None if draw.noise_scale is None else draw.noise_scale[row]
        noises.append((sizes[local], None if noise is None or not math.isfinite(noise) else noise))
        shape = noise_shape(sizes, scales, noises).shape if policy.noise_shape else None
        if shape is not None:
            post = posterior(sizes, proxy[rows].tolist(), observations, hyper, shape.tolist())
        else:
            post = post.observe(local, n)
    return jobs


def _proxy_r(post: Posterior) -> NDArray[np.float64]:
    r: NDArray[np.float64] = post.prior_samples / post.prior_samples.max()
    return r


def _learned_r(
    policy: Policy,
    post: Posterior,
    cost: NDArray[np.float64],
    k: int,
    spent: float,
    settings: GateSettings,
    rng: np.random.Generator | None,
) -> tuple[NDArray[np.float64], bool, float]:
    """The r of job k, whether the gate explored, and the overrun it spent."""
    if policy.chooser is not Chooser.mean or not policy.gate or not np.any(np.isfinite(cost)):
        return choose_r(post, policy.chooser, rng, kappa=policy.kappa), False, 0.0
    decision = gate(post, cost, jobs_before=k - 1, spent=spent, settings=settings)
    extra = decision.pessimistic if decision.explored else 0.0
    return gated_r(post, cost, decision), decision.explored, extra


def with_proxy_seeds(policy: Policy, seeds: int) -> Policy:
    """The policy with another estimate size (the trade-off table)."""
    return replace_policy(policy, name=f"{policy.name}, {seeds} proxy seeds", proxy_seeds=seeds)


def replace_policy(policy: Policy, **update: object) -> Policy:
    """A copy with fields replaced (validated)."""
    return Policy.model_validate({**policy.model_dump(), **update})


__all__ = [
    "CellCosts",
    "Draw",
    "Job",
    "cell_costs",
    "judge",
    "pick",
    "replace_policy",
    "run_sequence",
    "with_proxy_seeds",
]
