"""The recurring column: the same job five times, each planning from what the earlier ones saw.

For every main-table cell (model, target, board, limit) and every seed j, a sequence of jobs
k = 1 … 5 runs with the frontier profile of seed j and the proxy of the default estimate (merged
over the policy's proxy seeds) and the population tilt prior: the caches a recurring job would
hit. Job k is judged on seed `seeds[(j + k − 1) mod n]`: its own, never one it learned from. It
plans from the posterior given the observations of jobs 1 … k−1, each the measured N_target of
that job's seed at the batch size it ran (and its gradient noise scale where recorded): bandit
feedback, one number per job. The exploration gate decides whether it tries another size.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from edgetrain.api.efficiency import geometric_mean
from edgetrain.bench.paper.arithmetic import Stat, case_seed, mean_std
from edgetrain.bench.paper.config import BenchConfig, Policy, WorkloadConfig
from edgetrain.bench.paper.estimates import estimate_key
from edgetrain.bench.paper.evaluate import frontier_profile, truth_lut, twin_shape
from edgetrain.bench.paper.proxies import case_proxy, population_for, run_pairs
from edgetrain.bench.paper.replay import CellCosts, Draw, cell_costs, judge, pick, run_sequence
from edgetrain.bench.paper.results import (
    EstimateRecord,
    PolicyStat,
    RecurringJob,
    RecurringStat,
)
from edgetrain.planner import Lut
from edgetrain.planner.tilt import TiltPrior


def _draw(record: EstimateRecord, cell: CellCosts, interpolated: bool) -> Draw:
    """A seed's N (and noise scale) on the cell's batch sizes, NaN where missed or absent."""
    by_size = dict(zip(record.batch_sizes, record.samples(interpolated), strict=True))
    noise = None
    if record.gradient_noise_scale is not None:
        by_noise = dict(zip(record.batch_sizes, record.gradient_noise_scale, strict=True))
        noise = np.array([by_noise.get(int(b)) or np.nan for b in cell.batch_sizes])
    return Draw(np.array([by_size.get(int(b)) or np.nan for b in cell.batch_sizes]), noise)


def _floor_row(cell: CellCosts, others: Sequence[Draw]) -> int | None:
    """The plan from the geometric mean of the other seeds' whole N_target(b): the floor."""
    samples = [
        geometric_mean([float(d.samples[i]) if math.isfinite(d.samples[i]) else None
                        for d in others])
        for i in range(cell.batch_sizes.size)
    ]  # fmt: skip
    n = np.array([np.nan if s is None else s for s in samples])
    if not np.any(np.isfinite(n)):
        return None
    return pick(cell.plan_cost, n / np.nanmax(n))


def recurring_cell(
    config: BenchConfig,
    w: WorkloadConfig,
    target_name: str,
    board: str,
    limit: float | None,
    truth: Lut,
    estimates: dict[str, EstimateRecord],
    policy: Policy,
    tilt: TiltPrior | None = None,
    jobs_per_sequence: int | None = None,
) -> list[RecurringJob]:
    """Every sequence of one main-table cell under `policy`."""
    metric = config.power_metric
    limit_w = math.inf if limit is None else limit
    seeds = list(config.seeds)
    interpolated = config.interpolated
    target_ref = w.dataset(target_name)
    targets = {s: estimates[estimate_key(w, target_ref, s)] for s in seeds}
    count = min(jobs_per_sequence or config.recurring.jobs, len(seeds))
    out: list[RecurringJob] = []
    for j, first in enumerate(seeds):
        # The frontier profile of the main table's case of this seed: the profile cache a
        # recurring job hits (same RNG stream as evaluate._cases_at).
        rng = np.random.default_rng(case_seed(w.label, board, limit, first))
        profile = frontier_profile(truth, board, limit, rng, config.profiling, metric)
        if not profile.points:
            continue
        cell = cell_costs(truth, profile.points, limit_w, metric)
        proxy = _draw(case_proxy(config, w, w.proxy, first, estimates, policy), cell,
                      interpolated)  # fmt: skip
        single = _draw(estimates[estimate_key(w, w.dataset(w.proxy), first)], cell, interpolated)
        judged = [seeds[(j + k) % len(seeds)] for k in range(count)]
        draws = [_draw(targets[s], cell, interpolated) for s in judged]
        sequence = run_sequence(
            policy, cell, proxy.samples, draws, proxy_noise=proxy.noise_scale, tilt=tilt,
            budget_samples=float(w.sample_budget),
            rng=np.random.default_rng(case_seed(w.label, board, limit, "recurring", first)),
        )  # fmt: skip
        single_row = pick(cell.plan_cost, single.samples / np.nanmax(single.samples))
        for job, seed, draw in zip(sequence, judged, draws, strict=True):
            others = [_draw(targets[s], cell, interpolated) for s in seeds if s != seed]
            out.append(RecurringJob(
                workload=w.label, target=target_name, board=board, power_limit_w=limit,
                sequence=first, k=job.k, seed=seed, batch_size=job.batch_size,
                gpu_freq_hz=job.gpu_freq_hz, observed_samples=job.observed,
                over_oracle=job.over_oracle, static_over_oracle=job.static_over_oracle,
                informed_over_oracle=judge(cell, _floor_row(cell, others), draw.samples),
                single_seed_over_oracle=judge(cell, single_row, draw.samples),
                explored=job.explored,
            ))  # fmt: skip
    return out


def recurring_all(
    config: BenchConfig,
    estimates: dict[str, EstimateRecord],
    policy: Policy | None = None,
) -> list[RecurringJob]:
    """Every main-table cell's sequences under `policy` (default: the configured one)."""
    policy = policy or config.recurring.policy
    own = run_pairs(config, estimates)
    jobs: list[RecurringJob] = []
    for w in config.workloads:
        tilt = population_for(config, w, own, policy)
        model, shape, classes = twin_shape(w)
        for board in config.boards:
            truth = truth_lut(board.board, model, shape, classes, w.batch_sizes)
            for limit in board.power_limits_w:
                for target in w.targets:
                    jobs += recurring_cell(
                        config, w, target, board.board, limit, truth, estimates, policy, tilt
                    )
    return jobs


def _gain(job: RecurringJob) -> float | None:
    if job.static_over_oracle is None or job.over_oracle is None:
        return None
    return job.static_over_oracle - job.over_oracle


def _value(job: RecurringJob, value: str) -> float | None:
    got: float | None = _gain(job) if value == "gain" else getattr(job, value)
    return got


def per_seed(jobs: Sequence[RecurringJob], value: str) -> Stat:
    """Mean of `value` within each judged seed (the unit: seeds are the independent replicates),
    then the Stat over seeds."""
    by_seed: dict[int, list[float]] = {}
    for job in jobs:
        v = _value(job, value)
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
        stat = per_seed(at, "over_oracle")
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
                static=per_seed(at, "static_over_oracle"),
                gain=per_seed(at, "gain"),
                cumulative_regret=statistics.fmean(regret.values()) if regret else None,
            )
        )
    return out


def later(jobs: Sequence[RecurringJob], first_k: int = 2) -> list[RecurringJob]:
    """Jobs 2 … (the ones that could learn)."""
    return [j for j in jobs if j.k >= first_k]


def policy_stat(policy: Policy, jobs: Sequence[RecurringJob]) -> PolicyStat:
    """One policy's replay: job 1, jobs 2–5 pooled, their gain over job 1's plan, explorations."""
    rest = later(jobs)
    return PolicyStat(
        name=policy.name,
        proxy_seeds=policy.proxy_seeds,
        first=per_seed([j for j in jobs if j.k == 1], "over_oracle"),
        later=per_seed(rest, "over_oracle"),
        gain=per_seed(rest, "gain"),
        explored=sum(1 for j in jobs if j.explored),
        moved=sum(1 for j in rest if j.over_oracle is not None
                  and j.over_oracle != j.static_over_oracle),
        jobs=len(jobs),
    )  # fmt: skip


def policy_stats(config: BenchConfig, estimates: dict[str, EstimateRecord]) -> list[PolicyStat]:
    """Every comparison policy replayed on the same data, profiles and judging."""
    return [
        policy_stat(p, recurring_all(config, estimates, p)) for p in config.recurring.policies
    ]


def informed_stat(jobs: Sequence[RecurringJob]) -> Stat:
    """The leave-one-out plan: what knowing every other seed's whole N_target(b) gives."""
    return per_seed([job for job in jobs if job.k == 1], "informed_over_oracle")
