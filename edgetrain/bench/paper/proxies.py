"""The first plan's inputs in the bench: the proxy merged over several seeds (the default
estimate), the population tilt prior from the other models' (proxy, target) pairs, and what the
estimate costs the server."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from edgetrain.api.efficiency import EfficiencyVector, geometric_mean, merged_samples
from edgetrain.bench.paper.config import BenchConfig, Policy, WorkloadConfig
from edgetrain.bench.paper.estimates import estimate_key
from edgetrain.bench.paper.results import EstimateCost, EstimateRecord, NoiseFit
from edgetrain.planner.history import planning_vector, posterior
from edgetrain.planner.noise import fit_samples_shape
from edgetrain.planner.tilt import BENCH_PAIRS, TiltPair, TiltPrior, pair_tilt, population_tilt


def proxy_seeds_for(seeds: Sequence[int], judged: int, count: int) -> list[int]:
    """The seeds a case's proxy merges: with 1, the judged run's own seed (the paper's protocol);
    with more, the `count` seeds after it in turn, the judged seed left out (at most n − 1; with
    one seed in all, that one)."""
    if count <= 1 or len(seeds) == 1:
        return [judged]
    i = list(seeds).index(judged)
    n = len(seeds)
    return [seeds[(i + d) % n] for d in range(1, min(count, n - 1) + 1)]


def merged_record(records: Sequence[EstimateRecord], interpolated: bool) -> EstimateRecord:
    """Several seeds' runs of one (model, data set) as one estimate: N merged per batch size as
    a multi-seed estimate merges it (`merged_samples`), noise scales by geometric mean."""
    first = records[0]
    if len(records) == 1:
        return first
    merged = [
        merged_samples([r.samples(interpolated)[i] for r in records])
        for i in range(len(first.batch_sizes))
    ]
    noise = None
    if all(r.gradient_noise_scale is not None for r in records):
        noise = [
            geometric_mean([(r.gradient_noise_scale or [])[i] for r in records])
            for i in range(len(first.batch_sizes))
        ]
    return first.model_copy(update={
        "samples_to_accuracy": merged,
        "crossing_samples": merged if interpolated else None,
        "gradient_noise_scale": noise,
        "wall_s": sum(r.wall_s for r in records),
    })  # fmt: skip


def case_proxy(
    config: BenchConfig,
    w: WorkloadConfig,
    dataset: str,
    judged: int,
    estimates: dict[str, EstimateRecord],
    policy: Policy,
) -> EstimateRecord:
    """The proxy estimate a case judged on seed `judged` plans from."""
    ref = w.dataset(dataset)
    seeds = proxy_seeds_for(config.seeds, judged, policy.proxy_seeds)
    record = merged_record([estimates[estimate_key(w, ref, s)] for s in seeds], config.interpolated)
    return record.model_copy(update={"seed": judged}) if len(seeds) > 1 else record


def proxy_vector(record: EstimateRecord, interpolated: bool, seeds: int) -> EfficiencyVector | None:
    """The efficiency vector of a (merged) proxy estimate."""
    vector = record.efficiency(interpolated)
    return None if vector is None else vector.model_copy(update={"seeds": seeds})


def run_pairs(config: BenchConfig, estimates: dict[str, EstimateRecord]) -> list[TiltPair]:
    """Each workload's (proxy, target) pairs in this run: the tilt of the geometric mean N over
    seeds. Labelled `scale/model/proxy→target`; workloads that share a model's N (a twin
    variant) give its pairs once."""
    pairs: list[TiltPair] = []
    for w in config.workloads:
        for target in w.targets:
            if any(p.label == f"{config.scale}/{w.model}/{w.proxy}→{target}" for p in pairs):
                continue
            n = {
                name: [
                    geometric_mean([
                        estimates[estimate_key(w, w.dataset(name), s)].samples(
                            config.interpolated)[i] for s in config.seeds])
                    for i in range(len(w.batch_sizes))
                ]
                for name in (w.proxy, target)
            }  # fmt: skip
            tilt = pair_tilt(w.batch_sizes, n[w.proxy], n[target])
            if tilt is not None:
                pairs.append(TiltPair(f"{config.scale}/{w.model}/{w.proxy}→{target}", tilt))
    return pairs


def pair_model(pair: TiltPair) -> str:
    """The model a pair label names."""
    return pair.label.split("/")[1]


def population_for(
    config: BenchConfig, w: WorkloadConfig, own_pairs: Sequence[TiltPair], policy: Policy
) -> TiltPrior:
    """The tilt prior of workload `w`: every pair of another model, from this run and from the
    other committed benches (`BENCH_PAIRS`): never its own model's, so nothing it is judged on
    teaches it."""
    others = [p for p in BENCH_PAIRS if not p.label.startswith(f"{config.scale}/")]
    pool = [p for p in [*own_pairs, *others] if pair_model(p) != w.model]
    return population_tilt(pool, default_sd=policy.slope_sd)


def first_vector(
    vector: EfficiencyVector, tilt: TiltPrior | None, policy: Policy
) -> EfficiencyVector:
    """The first plan's vector: the proxy's r under the policy's prior (its tilt where trusted),
    no observations."""
    samples = vector.samples_by_batch_size()
    post = posterior(list(samples), list(samples.values()), [], policy.hyper(tilt))
    return planning_vector(vector, post, post.r())


def estimate_cost(
    config: BenchConfig, estimates: dict[str, EstimateRecord], seeds: int
) -> EstimateCost:
    """Seeds × the median wall time of one seed's proxy runs (every batch size), per workload
    (the median: some seeds may have trained on a loaded machine)."""
    per: dict[str, float] = {}
    for w in config.workloads:
        walls = [estimates[estimate_key(w, w.dataset(w.proxy), s)].wall_s for s in config.seeds]
        per[w.label] = seeds * statistics.median(walls)
    return EstimateCost(
        proxy_seeds=seeds,
        server_s=per,
        total_s=math.fsum(per.values()),
        how="proxy seeds × the median recorded wall time of one seed's runs at every batch size"
        " (real PyTorch training, one thread of this 2-core CPU); an Indexed estimate Job runs"
        " the same runs as pods, side by side where the server has room",
    )


def first_plan_inputs(
    config: BenchConfig,
    w: WorkloadConfig,
    proxy: str,
    judged: int,
    estimates: dict[str, EstimateRecord],
    policy: Policy,
    tilt: TiltPrior | None,
) -> tuple[EstimateRecord, EfficiencyVector | None]:
    """The (merged) proxy estimate of a case and the vector its first plan reads."""
    record = case_proxy(config, w, proxy, judged, estimates, policy)
    vector = proxy_vector(record, config.interpolated, min(policy.proxy_seeds, len(config.seeds)))
    if vector is None:
        return record, None
    return record, first_vector(vector, tilt, policy)


def noise_fits(config: BenchConfig, estimates: dict[str, EstimateRecord]) -> list[NoiseFit]:
    """Per (model, data set): the empirical model fitted to the geometric mean N(b) over seeds
    (sizes every seed reached), and the B_simple its runs measured."""
    out: list[NoiseFit] = []
    for w in config.workloads:
        for ref in w.datasets:
            if any((f.model, f.dataset) == (w.model, ref.name) for f in out):
                continue
            runs = [estimates[estimate_key(w, ref, s)] for s in config.seeds]
            sizes, means = [], []
            for i, b in enumerate(w.batch_sizes):
                got = [r.samples(config.interpolated)[i] for r in runs]
                if all(g is not None for g in got):
                    sizes.append(b)
                    means.append(geometric_mean(got) or math.nan)
            if len(sizes) < 2:
                continue
            fit = fit_samples_shape(sizes, means)
            measured = [v for r in runs for v in (r.gradient_noise_scale or []) if v]
            out.append(NoiseFit(
                model=w.model, dataset=ref.name, measured_b_noise=geometric_mean(measured),
                measured_runs=sum(1 for r in runs if r.gradient_noise_scale is not None),
                fitted_b_noise=fit.b_noise, fitted_e_min=fit.e_min,
                rms_log_residual=fit.rms_log_residual, residuals=list(fit.residuals),
            ))  # fmt: skip
    return out


__all__ = [
    "EstimateCost",
    "case_proxy",
    "estimate_cost",
    "first_plan_inputs",
    "first_vector",
    "merged_record",
    "noise_fits",
    "pair_model",
    "population_for",
    "proxy_seeds_for",
    "proxy_vector",
    "run_pairs",
]
