"""The synthetic-seed harness (issue 41): the bench's power without more training.

Per (model, data set), the real seeds' log N(b) give a mean vector and a residual covariance
across batch sizes, shrunk halfway to a constant-correlation target (5 seeds cannot fill a 6 × 6
covariance; the target keeps each size's variance and the mean correlation between sizes).
Synthetic seeds are draws from that Gaussian: N continuous (no evaluation grid), a miss where a
draw passes the sample budget. Every policy then runs the same sequences — a proxy merged over
its seeds, `horizon` jobs each judged on a fresh target draw — on the main table's cells, with a
pool of frontier profiles per cell. The unit is the synthetic seed (one draw set per model, shared
by its cells), as the real seed is in the headline.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from edgetrain.api.efficiency import merged_samples
from edgetrain.bench.paper.arithmetic import case_seed, mean_std
from edgetrain.bench.paper.config import BenchConfig, Policy, WorkloadConfig
from edgetrain.bench.paper.estimates import estimate_key
from edgetrain.bench.paper.evaluate import frontier_profile, truth_lut, twin_shape
from edgetrain.bench.paper.proxies import population_for, run_pairs
from edgetrain.bench.paper.replay import CellCosts, Draw, cell_costs, judge, pick, run_sequence
from edgetrain.bench.paper.results import (
    EstimateRecord,
    KStat,
    SyntheticPolicy,
    SyntheticSummary,
)
from edgetrain.planner.tilt import TiltPrior


@dataclass(frozen=True)
class Fit:
    """Mean log N(b) and the residual covariance of one (model, data set)."""

    mean: NDArray[np.float64]
    cov: NDArray[np.float64]
    chol: NDArray[np.float64]


def fit_dataset(records: Sequence[EstimateRecord], shrinkage: float, interpolated: bool) -> Fit:
    """The Gaussian of log N(b) over seeds; a miss contributes no residual at its size."""
    logs = np.array([[math.log(v) if v else np.nan for v in r.samples(interpolated)]
                     for r in records])  # fmt: skip
    mean = np.nanmean(logs, axis=0)
    resid = np.nan_to_num(logs - mean)
    cov = resid.T @ resid / max(len(records) - 1, 1)
    cov = (1 - shrinkage) * cov + shrinkage * constant_correlation(cov)
    cov += np.eye(cov.shape[0]) * 1e-10
    return Fit(mean, cov, np.linalg.cholesky(cov))


def constant_correlation(cov: NDArray[np.float64]) -> NDArray[np.float64]:
    """The shrinkage target: each size's own variance, every pair at the mean correlation (a
    seed that is slow at one b tends to be slow at all: that common part never changes r)."""
    sd = np.sqrt(np.clip(np.diag(cov), 1e-12, None))
    corr = cov / np.outer(sd, sd)
    off = corr[~np.eye(corr.shape[0], dtype=bool)]
    mean = float(np.clip(off.mean(), 0.0, 0.99)) if off.size else 0.0
    target = mean * np.outer(sd, sd)
    np.fill_diagonal(target, sd**2)
    out: NDArray[np.float64] = target
    return out


def draw(fit: Fit, rng: np.random.Generator, budget: float) -> NDArray[np.float64]:
    """One synthetic seed's N(b) (NaN where it passes the budget: a miss)."""
    n = np.exp(fit.mean + fit.chol @ rng.standard_normal(fit.mean.size))
    return np.where(n <= budget, n, np.nan)


def _merge(draws: Sequence[NDArray[np.float64]]) -> NDArray[np.float64]:
    merged = [merged_samples([None if not math.isfinite(d[i]) else float(d[i]) for d in draws])
              for i in range(draws[0].size)]  # fmt: skip
    return np.array([np.nan if m is None else m for m in merged])


@dataclass(frozen=True)
class _Cell:
    workload: str
    costs: list[CellCosts]  # the pool of profiles


def _cells(config: BenchConfig, w: WorkloadConfig, profiles: int) -> list[_Cell]:
    metric = config.power_metric
    model, shape, classes = twin_shape(w)
    out: list[_Cell] = []
    for board in config.boards:
        truth = truth_lut(board.board, model, shape, classes, w.batch_sizes)
        for limit in board.power_limits_w:
            limit_w = math.inf if limit is None else limit
            pool = []
            for p in range(profiles):
                rng = np.random.default_rng(case_seed(w.label, board.board, limit, "synth", p))
                prof = frontier_profile(truth, board.board, limit, rng, config.profiling, metric)
                if prof.points:
                    pool.append(cell_costs(truth, prof.points, limit_w, metric))
            for _target in w.targets:
                out.append(_Cell(w.label, pool))
    return out


@dataclass
class _Tally:
    over: dict[int, dict[int, list[float]]]  # k → seed → values
    gain: dict[int, dict[int, list[float]]]
    regret: list[float]
    static_regret: list[float]
    explored: int = 0


def _tally() -> _Tally:
    return _Tally({}, {}, [], [])


def _per_k(values: dict[int, dict[int, list[float]]]) -> list[KStat]:
    out = []
    for k in sorted(values):
        stat = mean_std(statistics.fmean(v) if v else None for v in values[k].values())
        out.append(KStat(k=k, mean=stat.mean, ci95=stat.ci95, n=stat.n))
    return out


def _pooled(values: dict[int, dict[int, list[float]]], ks: range) -> list[float | None]:
    seeds = {s for k in ks for s in values.get(k, {})}
    pooled = []
    for s in seeds:
        vs = [v for k in ks for v in values.get(k, {}).get(s, [])]
        pooled.append(statistics.fmean(vs) if vs else None)
    return pooled


def synthetic(
    config: BenchConfig,
    estimates: dict[str, EstimateRecord],
    policies: Sequence[Policy],
    *,
    seeds: int | None = None,
    horizon: int | None = None,
) -> SyntheticSummary:
    """Every policy over the synthetic seeds (see the module docstring)."""
    started = time.monotonic()
    sc = config.recurring.synthetic
    n_seeds, n_jobs = seeds or sc.seeds, horizon or sc.horizon
    own = run_pairs(config, estimates)
    tallies = {p.name: _tally() for p in policies}
    quantised: dict[int, list[float]] = {}
    sequences = 0
    for w in config.workloads:
        fits = {
            ref.name: fit_dataset([estimates[estimate_key(w, ref, s)] for s in config.seeds],
                                  sc.shrinkage, config.interpolated)
            for ref in w.datasets
        }  # fmt: skip
        cells = _cells(config, w, sc.profiles)
        tilts: dict[str, TiltPrior] = {p.name: population_for(config, w, own, p) for p in policies}
        budget = float(w.sample_budget)
        for s in range(n_seeds):
            rng = np.random.default_rng(case_seed(sc.seed, w.label, "synthetic", s))
            proxies = [draw(fits[w.proxy], rng, budget) for _ in range(4)]
            for target in w.targets:
                targets = [Draw(draw(fits[target], rng, budget)) for _ in range(n_jobs)]
                for c, cell in enumerate(cells):
                    if not cell.costs:
                        continue
                    costs = cell.costs[(s + c) % len(cell.costs)]
                    sequences += 1
                    for policy in policies:
                        proxy = _merge(proxies[: policy.proxy_seeds])
                        jobs = run_sequence(policy, costs, proxy, targets, tilt=tilts[policy.name],
                                            budget_samples=budget,
                                            rng=np.random.default_rng([s, c]))  # fmt: skip
                        _count(tallies[policy.name], s, jobs)
                    _quantised(quantised, s, costs, _merge(proxies[: policies[0].proxy_seeds]),
                               targets[0], w.eval_interval_samples)  # fmt: skip
    first = mean_std(statistics.fmean(v) for v in quantised.values() if v) if quantised else None
    return SyntheticSummary(
        seeds=n_seeds,
        horizon=n_jobs,
        sequences=sequences,
        wall_s=time.monotonic() - started,
        quantisation_cost=first,
        policies=[_summary(p, tallies[p.name]) for p in policies],
        how=(
            f"per (model, data set): mean log N(b) over the {len(config.seeds)} real seeds and"
            f" their residual covariance, shrunk {sc.shrinkage:.0%} to a constant-correlation"
            f" target; {n_seeds}"
            f" synthetic seeds, each one proxy merge and {n_jobs} target draws per model, shared"
            f" by its {len(config.boards)} boards × limits; {sc.profiles} frontier profiles per"
            " cell in turn; N continuous (no evaluation grid), a miss where a draw passes the"
            " budget; no gradient noise scale (none to draw from)"
        ),
    )


def _count(t: _Tally, seed: int, jobs: Sequence[object]) -> None:
    from edgetrain.bench.paper.replay import Job

    regret = static = 0.0
    for job in jobs:
        assert isinstance(job, Job)
        if job.over_oracle is not None:
            t.over.setdefault(job.k, {}).setdefault(seed, []).append(job.over_oracle)
            regret += job.over_oracle - 1
        if job.static_over_oracle is not None:
            static += job.static_over_oracle - 1
        if job.over_oracle is not None and job.static_over_oracle is not None:
            gain = job.static_over_oracle - job.over_oracle
            t.gain.setdefault(job.k, {}).setdefault(seed, []).append(gain)
        t.explored += job.explored
    t.regret.append(regret)
    t.static_regret.append(static)


def _quantised(
    out: dict[int, list[float]],
    seed: int,
    costs: CellCosts,
    proxy: NDArray[np.float64],
    target: Draw,
    interval: int,
) -> None:
    """What reading the proxy's N at the evaluation grid (the first evaluation at or past the
    crossing) costs job 1's plan (proxy r alone), against reading it where it crossed: paired,
    judged on the same continuous target."""
    if not np.any(np.isfinite(proxy)):
        return
    grid = np.ceil(proxy / interval) * interval
    on_grid = judge(costs, pick(costs.plan_cost, grid / np.nanmax(grid)), target.samples)
    crossed = judge(costs, pick(costs.plan_cost, proxy / np.nanmax(proxy)), target.samples)
    if on_grid is not None and crossed is not None:
        out.setdefault(seed, []).append(on_grid - crossed)


def _summary(policy: Policy, t: _Tally) -> SyntheticPolicy:
    horizon = max(t.over, default=1)
    return SyntheticPolicy(
        name=policy.name,
        per_k=_per_k(t.over),
        gain_per_k=_per_k(t.gain),
        gain_2_5=mean_std(_pooled(t.gain, range(2, 6))),
        later=mean_std(_pooled(t.over, range(2, horizon + 1))),
        regret=statistics.fmean(t.regret) if t.regret else math.nan,
        static_regret=statistics.fmean(t.static_regret) if t.static_regret else math.nan,
        explored=t.explored,
    )


__all__ = ["Fit", "constant_correlation", "draw", "fit_dataset", "synthetic"]
