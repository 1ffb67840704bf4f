"""Recurring jobs: the proxy's r as a prior, corrected by samples to target that earlier jobs
observed (a Gaussian linear model in log b), and a chooser that still explores (numpy, no I/O).

Model, in logs: `log N(b) = log N_proxy(b) + a + c·x_b + δ_b`, with `x_b = log2 b` centred on
the batch sizes, `a` the target set's scale against the proxy's, `c` a tilt per doubling of b
(pooled across batch sizes), `δ_b` what the tilt misses at b. An observation at b is
`log N_obs = log N(b) + ε`, `ε` the seed-to-seed noise. All Gaussian, so the posterior is exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.enums import StrEnum
from edgetrain.api.history import ObservationPool
from edgetrain.api.job_status import MAX_LISTED, HistoryStatus, ObservationStatus


class Chooser(StrEnum):
    """How the plan's r is drawn from the posterior."""

    thompson = "thompson"  # one posterior draw: explores in proportion to the doubt
    lcb = "lcb"  # optimistic: mean − κ·sd of log N relative to the most tried size
    mean = "mean"  # the posterior mean: exploits only


@dataclass(frozen=True)
class HistoryPrior:
    """Prior standard deviations of the log-correction, and the noise of one observation."""

    scale_sd: float = 1.0  # target set vs proxy: N may differ by a factor e either way
    slope_sd: float = 0.2  # tilt of log N per doubling of b: ±20 % per doubling (1 sd)
    size_sd: float = 0.15  # per-b deviation from the tilt (proxy noise and real differences)
    noise_sd: float = 0.12  # one training's log N around its mean (seed to seed)

    def __post_init__(self) -> None:
        for name in ("scale_sd", "slope_sd", "size_sd", "noise_sd"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"HistoryPrior.{name} must be a finite number > 0, got {value}")


@dataclass(frozen=True)
class Posterior:
    """The posterior over `θ = (a, c, δ_1 … δ_B)` and what it says about N(b) per batch size."""

    batch_sizes: NDArray[np.int64]
    prior_samples: NDArray[np.float64]  # the proxy's N(b): the prior's median
    design: NDArray[np.float64]  # row b: the coefficients of θ in log N(b) − log N_proxy(b)
    mean: NDArray[np.float64]
    cov: NDArray[np.float64]
    observed: NDArray[np.int64]  # observations per batch size

    @property
    def observations(self) -> int:
        """How many observations the posterior has seen."""
        return int(self.observed.sum())

    def log_samples(self) -> NDArray[np.float64]:
        """Posterior mean of log N(b)."""
        return np.log(self.prior_samples) + self.design @ self.mean

    def samples(self) -> NDArray[np.float64]:
        """Posterior median of N(b) (exp of the mean log)."""
        return np.exp(self.log_samples())

    def log_sd(self) -> NDArray[np.float64]:
        """Posterior sd of log N(b), the target set's scale included."""
        var: NDArray[np.float64] = np.einsum("ij,jk,ik->i", self.design, self.cov, self.design)
        return np.sqrt(var)

    def relative_log_sd(self) -> NDArray[np.float64]:
        """Posterior sd of log N(b) − log N(b_ref), b_ref the most observed size (the first when
        none is): the doubt about how b compares with what was tried, the target set's common
        scale taken out. It is 0 at b_ref and grows with the distance in log b."""
        ref = int(np.argmax(self.observed))
        diff = self.design - self.design[ref]
        var: NDArray[np.float64] = np.einsum("ij,jk,ik->i", diff, self.cov, diff)
        return np.sqrt(np.clip(var, 0.0, None))

    def r(self) -> NDArray[np.float64]:
        """Posterior-mean r: N(b) / max N(b)."""
        return _normalised(self.log_samples())

    def draw_log_samples(self, rng: np.random.Generator) -> NDArray[np.float64]:
        """One draw of log N(b) from the posterior."""
        theta = rng.multivariate_normal(self.mean, self.cov, method="cholesky")
        return np.log(self.prior_samples) + self.design @ theta


def _normalised(log_n: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.exp(log_n - np.max(log_n))


def centred_log2(batch_sizes: Sequence[int]) -> NDArray[np.float64]:
    """`log2 b` minus its mean over the batch sizes: the tilt pivots in the middle."""
    x = np.log2(np.asarray(batch_sizes, dtype=np.float64))
    centred: NDArray[np.float64] = x - x.mean()
    return centred


def posterior(
    batch_sizes: Sequence[int],
    prior_samples: Sequence[float],
    observations: Sequence[tuple[int, float]],
    prior: HistoryPrior = HistoryPrior(),
) -> Posterior:
    """The posterior of N(b) given the proxy's N(b) and (batch size, samples to target) pairs.

    Observations at a batch size outside `batch_sizes` are ignored (the caller warns).
    """
    bs = np.asarray(batch_sizes, dtype=np.int64)
    n_prior = np.asarray(prior_samples, dtype=np.float64)
    if bs.ndim != 1 or bs.size == 0 or n_prior.shape != bs.shape:
        raise ValueError("batch_sizes and prior_samples must be equal-length, non-empty 1-D")
    if np.any(bs <= 0) or len(set(bs.tolist())) != bs.size:
        raise ValueError(f"batch sizes must be distinct and > 0, got {bs.tolist()}")
    if not np.all(np.isfinite(n_prior) & (n_prior > 0)):
        raise ValueError(f"prior samples must be finite and > 0, got {n_prior.tolist()}")
    size = bs.size
    design = np.hstack([np.ones((size, 1)), centred_log2(bs.tolist())[:, None], np.eye(size)])
    prior_precision = np.diag(
        [prior.scale_sd**-2, prior.slope_sd**-2, *([prior.size_sd**-2] * size)]
    )
    row_of = {int(b): i for i, b in enumerate(bs)}
    used = [(row_of[int(b)], float(n)) for b, n in observations if int(b) in row_of]
    for _, n in used:
        if not (math.isfinite(n) and n > 0):
            raise ValueError(f"an observed sample count must be finite and > 0, got {n}")
    observed = np.zeros(size, dtype=np.int64)
    precision = prior_precision.copy()
    weighted = np.zeros(design.shape[1])
    for i, n in used:
        h = design[i]
        precision += np.outer(h, h) / prior.noise_sd**2
        weighted += h * (math.log(n) - math.log(n_prior[i])) / prior.noise_sd**2
        observed[i] += 1
    cov = np.linalg.inv(precision)
    cov = (cov + cov.T) / 2  # exact symmetry for the Cholesky of a draw
    return Posterior(
        batch_sizes=bs,
        prior_samples=n_prior,
        design=design,
        mean=cov @ weighted,
        cov=cov,
        observed=observed,
    )


def choose_r(
    post: Posterior,
    chooser: Chooser = Chooser.thompson,
    rng: np.random.Generator | None = None,
    *,
    kappa: float = 1.0,
) -> NDArray[np.float64]:
    """The r the plan uses, per batch size, in (0, 1].

    With no observations it is the proxy's r whatever the chooser: nothing was learned, and a
    draw from the prior alone would only add noise to today's plan. With observations, Thompson
    sampling draws one N(b) from the posterior (seeded `rng`: reproducible), so a batch size is
    tried about as often as it is likely to be the best; `lcb` takes `mean − κ·sd` of log N
    relative to the most tried size, so a never-tried size, whose doubt stays wide, gets its
    chance (a bound on log N itself would not: the unknown common scale would hide it).
    """
    if post.observations == 0 or chooser is Chooser.mean:
        return post.r()
    if chooser is Chooser.lcb:
        return _normalised(post.log_samples() - kappa * post.relative_log_sd())
    if rng is None:
        raise ValueError("Thompson sampling needs a seeded rng (reproducible plans)")
    return _normalised(post.draw_log_samples(rng))


def posterior_of_vector(
    prior: EfficiencyVector,
    observations: Sequence[tuple[int, float]],
    hyper: HistoryPrior = HistoryPrior(),
) -> Posterior:
    """The posterior over the batch sizes that reached the target on the proxy."""
    samples = prior.samples_by_batch_size()
    return posterior(list(samples), list(samples.values()), observations, hyper)


def planning_vector(
    prior: EfficiencyVector, post: Posterior, r: NDArray[np.float64]
) -> EfficiencyVector:
    """The efficiency vector the plan reads: `r` (from `choose_r`) on the prior's batch sizes,
    scaled to the posterior's N so `predicted_seconds` stays in samples; null where the proxy
    never reached the target (excluded, as before)."""
    by_size = {
        int(b): float(x)
        for b, x in zip(post.batch_sizes, r * float(np.max(post.samples())), strict=True)
    }
    return EfficiencyVector.from_samples(
        model=prior.model,
        dataset=prior.dataset,
        target_accuracy=prior.target_accuracy,
        batch_sizes=prior.batch_sizes,
        samples_to_accuracy=[by_size.get(b) for b in prior.batch_sizes],
    )


#: What a job uses (and the bench's recurring column): a mild lower confidence bound.
DEFAULT_CHOOSER = Chooser.lcb
DEFAULT_KAPPA = 0.5


def learn(
    prior: EfficiencyVector,
    pool: ObservationPool,
    key: str,
    *,
    config_map: str | None = None,
    seed: int = 0,
    chooser: Chooser = DEFAULT_CHOOSER,
    kappa: float = DEFAULT_KAPPA,
    hyper: HistoryPrior = HistoryPrior(),
) -> tuple[EfficiencyVector, HistoryStatus]:
    """The efficiency vector a recurring job plans from, and what its status shows."""
    post = posterior_of_vector(prior, pool.pairs(), hyper)
    r = choose_r(post, chooser, np.random.default_rng(seed), kappa=kappa)
    listed = pool.used[-MAX_LISTED:]
    status = HistoryStatus(
        config_map=config_map,
        key=key,
        chooser=chooser.value if post.observations else "prior (no observations)",
        batch_sizes=[int(b) for b in post.batch_sizes],
        prior_r=(post.prior_samples / post.prior_samples.max()).tolist(),
        posterior_r=post.r().tolist(),
        posterior_log_sd=post.log_sd().tolist(),
        planned_r=r.tolist(),
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
    )
    return planning_vector(prior, post, r), status


__all__ = [
    "DEFAULT_CHOOSER",
    "DEFAULT_KAPPA",
    "Chooser",
    "HistoryPrior",
    "Posterior",
    "centred_log2",
    "choose_r",
    "learn",
    "planning_vector",
    "posterior",
    "posterior_of_vector",
]
