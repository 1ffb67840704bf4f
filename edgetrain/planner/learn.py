"""What a recurring job plans from: the posterior of `history.py` built from its sources (proxy,
observations, population tilt, noise scales), then gated against a profile (`gate.py`); and the
status that says so (numpy and models, no I/O)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from edgetrain.api.efficiency import EfficiencyVector, geometric_mean
from edgetrain.api.history import ObservationPool
from edgetrain.api.job_status import (
    MAX_LISTED,
    GateStatus,
    HistoryStatus,
    ObservationStatus,
    RSourcesStatus,
)
from edgetrain.api.plan import Objective, PowerMetric
from edgetrain.planner.gate import (
    GateDecision,
    GateSettings,
    cost_per_sample,
    gate,
    gated_r,
    incumbent_row,
)
from edgetrain.planner.history import (
    DEFAULT_CHOOSER,
    HistoryPrior,
    Posterior,
    planning_vector,
    posterior,
)
from edgetrain.planner.lut import Lut
from edgetrain.planner.noise import shape_difference
from edgetrain.planner.tilt import BENCH_PAIRS, TiltPair, TiltPrior, pair_tilt, population_tilt


@dataclass(frozen=True)
class NoiseShape:
    """The noise scales on both sets and the shape difference they predict (None: unknown)."""

    proxy: float | None
    target: float | None
    shape: NDArray[np.float64] | None


def noise_shape(
    batch_sizes: Sequence[int],
    proxy_scales: Sequence[float | None] | None,
    observed: Iterable[tuple[int, float | None]],
) -> NoiseShape:
    """`g_b` from the proxy's B_simple per size and the targets' observed at their sizes: the
    target-over-proxy ratio of noise scales (geometric mean over observations, each against the
    proxy at its own size) applied to the proxy's mean scale."""
    by_size = dict(zip(batch_sizes, proxy_scales or [None] * len(batch_sizes), strict=True))
    proxy = geometric_mean(list(by_size.values()))
    ratios: list[float | None] = []
    targets: list[float | None] = []
    for b, scale in observed:
        targets.append(scale)
        p = by_size.get(b)
        ratios.append(None if scale is None or p is None else scale / p)
    ratio, target = geometric_mean(ratios), geometric_mean(targets)
    if proxy is None or ratio is None:
        return NoiseShape(proxy, target, None)
    return NoiseShape(proxy, target, shape_difference(batch_sizes, ratio * proxy, proxy))


def history_pair(pool: ObservationPool, label: str) -> TiltPair | None:
    """A (proxy, target) pair from a history whose observations span ≥ 2 sizes: the tilt of the
    observed N against the proxy's N each job planned from."""
    x, y = [], []
    for o in pool.used:
        if o.proxy_batch_sizes is None or o.proxy_samples is None:
            continue
        proxy = dict(zip(o.proxy_batch_sizes, o.proxy_samples, strict=False)).get(o.batch_size)
        if proxy:
            x.append(o.batch_size)
            y.append(math.log(o.samples_to_accuracy) - math.log(proxy))
    if len(set(x)) < 2:
        return None
    means = {b: statistics.fmean(v for xb, v in zip(x, y, strict=True) if xb == b) for b in set(x)}
    sizes = sorted(means)
    tilt = pair_tilt(sizes, [1.0] * len(sizes), [math.exp(means[b]) for b in sizes])
    return None if tilt is None else TiltPair(label, tilt)


def tilt_prior(
    cache_pairs: Sequence[TiltPair] = (), hyper: HistoryPrior = HistoryPrior()
) -> TiltPrior:
    """The population prior: the bench's pairs (`tilt.BENCH_PAIRS`) and the cache's."""
    return population_tilt([*BENCH_PAIRS, *cache_pairs], default_sd=hyper.slope_sd)


@dataclass(frozen=True)
class Learned:
    """A job's posterior and what its status shows, before a profile gates it."""

    prior: EfficiencyVector
    post: Posterior
    status: HistoryStatus
    spent: float


def learn(
    prior: EfficiencyVector,
    pool: ObservationPool,
    key: str,
    *,
    config_map: str | None = None,
    hyper: HistoryPrior = HistoryPrior(),
    tilt: TiltPrior | None = None,
    use_noise: bool = True,
) -> Learned:
    """The posterior of a recurring job from the proxy's vector, its history and the population
    tilt prior (untrusted: no tilt), with the noise-scale shape where both scales are known."""
    tilt = tilt or population_tilt([], default_sd=hyper.slope_sd)
    hyper = replace(hyper, slope_mean=tilt.mean if tilt.trusted else 0.0,
                    slope_sd=tilt.sd if tilt.trusted else hyper.slope_sd)  # fmt: skip
    samples = prior.samples_by_batch_size()
    sizes = list(samples)
    scales = None
    if prior.gradient_noise_scale is not None:
        by_size = dict(zip(prior.batch_sizes, prior.gradient_noise_scale, strict=True))
        scales = [by_size[b] for b in sizes]
    noise = noise_shape(sizes, scales, [(o.batch_size, o.gradient_noise_scale) for o in pool.used])
    shape = noise.shape.tolist() if use_noise and noise.shape is not None else None
    post = posterior(sizes, list(samples.values()), pool.pairs(), hyper, shape)
    listed = pool.used[-MAX_LISTED:]
    ref = int(np.argmax(post.observed)) if post.observations else incumbent_row(post.log_samples())
    status = HistoryStatus(
        config_map=config_map,
        key=key,
        chooser=DEFAULT_CHOOSER.value,
        batch_sizes=[int(b) for b in post.batch_sizes],
        prior_r=(post.prior_samples / post.prior_samples.max()).tolist(),
        posterior_r=post.r().tolist(),
        posterior_log_sd=post.relative_log_sd(ref).tolist(),
        planned_r=post.r().tolist(),
        observations=[
            ObservationStatus(
                job=o.job,
                batch_size=o.batch_size,
                samples=o.samples_to_accuracy,
                reached_target=o.reached_target,
            )
            for o in listed
        ],
        observations_total=len(pool.used),
        skipped=[f"{name}: {why}" for name, why in {**pool.skipped, **pool.excluded}.items()][
            :MAX_LISTED
        ],
        sources=RSourcesStatus(
            proxy_seeds=prior.seeds,
            observations=post.observations,
            tilt_prior_mean=hyper.slope_mean,
            tilt_prior_sd=hyper.slope_sd,
            tilt_pairs=tilt.pairs,
            tilt_trusted=tilt.trusted,
            noise_scale_proxy=noise.proxy,
            noise_scale_target=noise.target,
            noise_shape_used=shape is not None,
        ),
    )
    return Learned(prior=prior, post=post, status=status, spent=pool.spent())


def gate_status(decision: GateDecision, settings: GateSettings) -> GateStatus:
    """The decision as status shows it."""
    return GateStatus(
        explored=decision.explored,
        incumbent_batch_size=decision.incumbent,
        candidate_batch_size=decision.candidate,
        value=decision.value,
        cost=decision.cost,
        pessimistic=decision.pessimistic,
        budget_left=decision.budget_left,
        expected_recurrences=settings.expected_recurrences,
        remaining=decision.remaining,
        alpha=settings.alpha,
        reason=decision.reason,
    )


def plan_vector(
    learned: Learned,
    lut: Lut | None,
    power_limit_w: float,
    *,
    metric: PowerMetric = PowerMetric.peak,
    objective: Objective = Objective.time,
    settings: GateSettings = GateSettings(),
) -> tuple[EfficiencyVector, HistoryStatus]:
    """The vector the plan reads and the status: the posterior mean, gated on `lut` (None: no
    profile to weigh costs on, so no exploration)."""
    post = learned.post
    if lut is None:
        return planning_vector(learned.prior, post, post.r()), learned.status
    costs = cost_per_sample(lut, [int(b) for b in post.batch_sizes], power_limit_w, metric,
                            objective)  # fmt: skip
    if not np.any(np.isfinite(costs)):
        return planning_vector(learned.prior, post, post.r()), learned.status
    decision = gate(post, costs, jobs_before=post.observations, spent=learned.spent,
                    settings=settings)  # fmt: skip
    r = gated_r(post, costs, decision)
    chooser = DEFAULT_CHOOSER.value + (
        f" (gate explores b={decision.candidate})" if decision.explored else " (gate: exploits)"
    )
    update = {"planned_r": r.tolist(), "chooser": chooser, "gate": gate_status(decision, settings)}
    status = learned.status.model_copy(update=update)
    return planning_vector(learned.prior, post, r), status


def observation_extras(
    history: HistoryStatus | None, noise_scale: float | None
) -> dict[str, object]:
    """What an observation carries besides N: the noise scale measured, whether the gate explored
    (and its pessimistic overrun: the budget spent) and the proxy's r it planned from (with the
    sizes: a tilt pair for other jobs, once a history spans two sizes)."""
    gate = history.gate if history is not None else None
    return {
        "gradient_noise_scale": noise_scale,
        "explored": bool(gate and gate.explored),
        "explore_overrun": gate.pessimistic if gate and gate.explored else None,
        "proxy_batch_sizes": None if history is None else list(history.batch_sizes),
        "proxy_samples": None if history is None else list(history.prior_r),
    }


__all__ = [
    "Learned",
    "NoiseShape",
    "gate_status",
    "history_pair",
    "learn",
    "noise_shape",
    "observation_extras",
    "plan_vector",
    "tilt_prior",
]
