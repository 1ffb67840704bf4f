"""The recurring column: the same job five times, each planning from what the earlier ones saw.

For every main-table cell (model, target, board, limit) and every seed j, a sequence of jobs
k = 1 … 5 runs with the cached proxy r and frontier profile of seed j (the caches a recurring job
would hit). Job k is judged on seed `seeds[(j + k − 1) mod n]`: its own, never one it learned
from. It plans from the posterior r given the observations of jobs 1 … k−1, each the measured
N_target of that job's seed at the batch size that job ran (bandit feedback: one number per job,
not the vector). Job 1 has none, so it is the main table's edgetrain case of seed j.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence

import numpy as np

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.plan import PowerMetric
from edgetrain.bench.paper.arithmetic import Stat, case_seed, mean_std, ratio
from edgetrain.bench.paper.config import BenchConfig, RecurringConfig, WorkloadConfig
from edgetrain.bench.paper.estimates import estimate_key
from edgetrain.bench.paper.evaluate import (
    frontier_profile,
    oracle_outcome,
    outcome,
    target_samples_of,
    truth_lut,
    twin_shape,
)
from edgetrain.bench.paper.results import EstimateRecord, RecurringJob, RecurringStat
from edgetrain.planner import InfeasibleError, Lut, plan
from edgetrain.planner.history import choose_r, planning_vector, posterior_of_vector

#: The goals of issue 30: mean edgetrain/oracle by the 3rd job, and no job worse than the 1st.
GOAL_BY_JOB = 3
GOAL_RATIO = 1.01
GOAL_NO_WORSE = 0.01


def _job_plan(
    lut: Lut,
    vector: EfficiencyVector,
    limit_w: float,
    metric: PowerMetric,
) -> tuple[int, int] | None:
    try:
        chosen = plan(lut, vector, limit_w, metric=metric)
    except InfeasibleError:
        return None
    return chosen.batch_size, chosen.gpu_freq_hz


def _over_oracle(
    truth: Lut,
    choice: tuple[int, int] | None,
    samples: dict[int, float],
    limit_w: float,
    metric: PowerMetric,
    oracle_tta: float | None,
) -> float | None:
    """The true time to accuracy of (b, f) on this seed over the oracle's."""
    if choice is None:
        return None
    return ratio(outcome(truth, *choice, samples, limit_w, metric).tta_s, oracle_tta)


def _informed_vector(
    proxy: EfficiencyVector, others: Sequence[EstimateRecord]
) -> EfficiencyVector | None:
    """Geometric mean of the other seeds' N_target(b), where every one reached the target."""
    samples: list[float | None] = []
    for i, _b in enumerate(proxy.batch_sizes):
        values = [o.samples_to_accuracy[i] for o in others]
        reached = [v for v in values if v is not None]
        samples.append(math.exp(statistics.fmean(map(math.log, reached))) if reached else None)
    if all(s is None for s in samples):
        return None
    return EfficiencyVector.from_samples(
        model=proxy.model,
        dataset="target (leave-one-out)",
        target_accuracy=proxy.target_accuracy,
        batch_sizes=proxy.batch_sizes,
        samples_to_accuracy=samples,
    )


def recurring_cell(
    config: BenchConfig,
    w: WorkloadConfig,
    target_name: str,
    board: str,
    limit: float | None,
    truth: Lut,
    estimates: dict[str, EstimateRecord],
    recurring: RecurringConfig,
) -> list[RecurringJob]:
    """Every sequence of one main-table cell."""
    metric = config.power_metric
    limit_w = math.inf if limit is None else limit
    seeds = list(config.seeds)
    proxy_ref, target_ref = w.dataset(w.proxy), w.dataset(target_name)
    targets = {s: estimates[estimate_key(w, target_ref, s)] for s in seeds}
    jobs: list[RecurringJob] = []
    for j, first in enumerate(seeds):
        # The frontier profile of the main table's case of this seed: the profile cache a
        # recurring job hits (same RNG stream as evaluate._cases_at).
        rng = np.random.default_rng(case_seed(w.label, board, limit, first))
        profile = frontier_profile(truth, board, limit, rng, config.profiling, metric)
        proxy = estimates[estimate_key(w, proxy_ref, first)].efficiency()
        if proxy is None or not profile.points:
            continue
        lut = Lut.from_points(profile.points)
        static = _job_plan(lut, proxy, limit_w, metric)
        observations: list[tuple[int, float]] = []
        for k in range(1, min(recurring.jobs, len(seeds)) + 1):
            seed = seeds[(j + k - 1) % len(seeds)]
            target = targets[seed]
            samples = target_samples_of(target)
            post = posterior_of_vector(proxy, observations, recurring.prior())
            draw = np.random.default_rng(case_seed(w.label, board, limit, "recurring", first, k))
            chosen = _job_plan(
                lut,
                planning_vector(
                    proxy, post, choose_r(post, recurring.chooser, draw, kappa=recurring.kappa)
                ),
                limit_w,
                metric,
            )
            best = oracle_outcome(truth, samples, limit_w, metric)
            oracle_tta = None if best is None else best.tta_s

            judged = functools.partial(
                _over_oracle,
                truth,
                samples=samples,
                limit_w=limit_w,
                metric=metric,
                oracle_tta=oracle_tta,
            )
            others = [targets[s] for s in seeds if s != seed]
            informed = _informed_vector(proxy, others)
            observed = None if chosen is None else samples.get(chosen[0])
            jobs.append(
                RecurringJob(
                    workload=w.label,
                    target=target_name,
                    board=board,
                    power_limit_w=limit,
                    sequence=first,
                    k=k,
                    seed=seed,
                    batch_size=None if chosen is None else chosen[0],
                    gpu_freq_hz=None if chosen is None else chosen[1],
                    observed_samples=observed,
                    over_oracle=judged(chosen),
                    static_over_oracle=judged(static),
                    informed_over_oracle=None
                    if informed is None
                    else judged(_job_plan(lut, informed, limit_w, metric)),
                )
            )
            if chosen is not None:
                # A miss is censored at the budget: a lower bound, kept as if exact (pessimistic
                # for that size, which is the safe side).
                observations.append(
                    (chosen[0], observed if observed is not None else float(w.sample_budget))
                )
    return jobs


def recurring_all(
    config: BenchConfig,
    estimates: dict[str, EstimateRecord],
    recurring: RecurringConfig | None = None,
) -> list[RecurringJob]:
    """Every main-table cell's sequences (pure twin and numpy: seconds)."""
    recurring = recurring or config.recurring
    jobs: list[RecurringJob] = []
    for w in config.workloads:
        model, shape, classes = twin_shape(w)
        for board in config.boards:
            truth = truth_lut(board.board, model, shape, classes, w.batch_sizes)
            for limit in board.power_limits_w:
                for target in w.targets:
                    jobs += recurring_cell(
                        config, w, target, board.board, limit, truth, estimates, recurring
                    )
    return jobs


def _gain(job: RecurringJob) -> float | None:
    if job.static_over_oracle is None or job.over_oracle is None:
        return None
    return job.static_over_oracle - job.over_oracle


def _per_seed(jobs: Sequence[RecurringJob], value: str) -> Stat:
    by_seed: dict[int, list[float]] = {}
    for job in jobs:
        v = _gain(job) if value == "gain" else getattr(job, value)
        by_seed.setdefault(job.seed, [])
        if v is not None:
            by_seed[job.seed].append(v)
    return mean_std(statistics.fmean(vs) if vs else None for vs in by_seed.values())


def recurring_stats(jobs: Sequence[RecurringJob]) -> list[RecurringStat]:
    """edgetrain/oracle per k, with the no-learning plan and the cumulative regret beside it."""
    out: list[RecurringStat] = []
    ks = sorted({job.k for job in jobs})
    regret: dict[tuple[str, str, str, float | None, int], float] = {}
    for k in ks:
        at = [job for job in jobs if job.k == k]
        stat = _per_seed(at, "over_oracle")
        for job in at:
            key = (job.workload, job.target, job.board, job.power_limit_w, job.sequence)
            regret[key] = regret.get(key, 0.0) + (
                0.0 if job.over_oracle is None else job.over_oracle - 1.0
            )
        out.append(
            RecurringStat(
                k=k,
                mean=stat.mean,
                ci95=stat.ci95,
                std=stat.std,
                n=stat.n,
                missing=stat.missing,
                static=_per_seed(at, "static_over_oracle"),
                gain=_per_seed(at, "gain"),
                cumulative_regret=statistics.fmean(regret.values()) if regret else None,
            )
        )
    return out


def informed_stat(jobs: Sequence[RecurringJob]) -> Stat:
    """The leave-one-out plan: what knowing every other seed's whole N_target(b) gives."""
    return _per_seed([job for job in jobs if job.k == 1], "informed_over_oracle")


def recurring_goals(stats: Sequence[RecurringStat]) -> dict[str, bool]:
    """Issue 30's goals: ≤ 1.01 by job 3; no job more than 1 % worse than job 1."""
    by_k = {s.k: s.mean for s in stats}
    first = by_k.get(1)
    by_goal = by_k.get(GOAL_BY_JOB)
    return {
        f"recurring ≤ {GOAL_RATIO:g} by job {GOAL_BY_JOB}": by_goal is not None
        and by_goal <= GOAL_RATIO,
        "recurring: no job > job 1 + 1 %": first is not None
        and all(m is not None and m <= first * (1 + GOAL_NO_WORSE) for m in by_k.values()),
    }
