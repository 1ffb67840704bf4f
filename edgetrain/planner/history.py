"""Recurring jobs: the proxy's r as a prior, corrected by what earlier jobs observed on the target
set (a Gaussian linear model in log b), planned at the posterior mean (numpy, no I/O).

Model, in logs: `log N(b) = log N_proxy(b) + a + c·x_b + w·g_b + δ_b`, with `x_b = log2 b`
(centred), `a` the target set's scale against the proxy's (flat prior: bandit feedback at one size
says how hard the target is, never which size is best), `c` a tilt per doubling of b (its prior
mean from the population of (proxy, target) pairs, `tilt.py`), `g_b` the shape difference the
gradient noise scales predict (`noise.py`; 0 until both were measured) with weight `w` ~ N(1, ·),
`δ_b` what the tilt misses at b. An observation at b is `log N_obs = log N(b) + ε`. All Gaussian,
so the posterior is exact. Whether to try another size is the gate's (`gate.py`), not the model's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.enums import StrEnum

#: The scale's prior sd when it is flat: far wider than any N ratio, so it carries no weight.
FLAT_SCALE_SD = 1e4
#: Columns of θ before the per-size deviations: scale a, tilt c, noise-shape weight w.
SCALE, TILT, SHAPE, SIZES = 0, 1, 2, 3


class Chooser(StrEnum):
    """How the plan's r is drawn from the posterior (`mean` is what jobs use; the others stay
    for the bench's comparison)."""

    mean = "mean"  # the posterior mean: exploits; exploration is the gate's
    lcb = "lcb"  # optimistic: mean − κ·sd of log N relative to the most tried size (issue 30)
    thompson = "thompson"  # one posterior draw: explores in proportion to the doubt


@dataclass(frozen=True)
class HistoryPrior:
    """Prior of the log-correction, and the noise of one observation."""

    scale_sd: float | None = None  # None: flat; a number: the old proper prior (issue 30: 1.0)
    slope_mean: float = 0.0  # tilt per doubling of b expected before any observation
    slope_sd: float = 0.2  # its doubt: ±20 % per doubling (1 sd)
    size_sd: float = 0.15  # per-b deviation from the tilt (proxy noise and real differences)
    noise_sd: float = 0.12  # one training's log N around its mean (seed to seed)
    shape_sd: float = 0.5  # doubt on the weight (prior mean 1) of the noise scales' shape

    def __post_init__(self) -> None:
        for name in ("slope_sd", "size_sd", "noise_sd", "shape_sd"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"HistoryPrior.{name} must be a finite number > 0, got {value}")
        if self.scale_sd is not None and not (math.isfinite(self.scale_sd) and self.scale_sd > 0):
            raise ValueError(f"HistoryPrior.scale_sd must be None or > 0, got {self.scale_sd}")
        if not math.isfinite(self.slope_mean):
            raise ValueError(f"HistoryPrior.slope_mean must be finite, got {self.slope_mean}")


@dataclass(frozen=True)
class Posterior:
    """The posterior over `θ = (a, c, w, δ_1 … δ_B)` and what it says about N(b) per size."""

    batch_sizes: NDArray[np.int64]
    prior_samples: NDArray[np.float64]  # the proxy's N(b)
    design: NDArray[np.float64]  # row b: the coefficients of θ in log N(b) − log N_proxy(b)
    mean: NDArray[np.float64]
    cov: NDArray[np.float64]
    observed: NDArray[np.int64]  # observations per batch size
    noise_sd: float

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
        """Posterior sd of log N(b), the target set's scale included (huge while the flat scale
        has seen nothing: how hard the target is, is then unknown)."""
        var: NDArray[np.float64] = np.einsum("ij,jk,ik->i", self.design, self.cov, self.design)
        return np.sqrt(var)

    def relative_log_sd(self, ref: int | None = None) -> NDArray[np.float64]:
        """Posterior sd of log N(b) − log N(b_ref) (b_ref: row `ref`, else the most observed
        size): the doubt about how b compares with it, the common scale taken out."""
        ref = int(np.argmax(self.observed)) if ref is None else ref
        diff = self.design - self.design[ref]
        var: NDArray[np.float64] = np.einsum("ij,jk,ik->i", diff, self.cov, diff)
        return np.sqrt(np.clip(var, 0.0, None))

    def r(self) -> NDArray[np.float64]:
        """Posterior-mean r: N(b) / max N(b)."""
        return normalised(self.log_samples())

    def draw_log_samples(self, rng: np.random.Generator) -> NDArray[np.float64]:
        """One draw of log N(b) from the posterior."""
        theta = rng.multivariate_normal(self.mean, self.cov, method="cholesky")
        return np.log(self.prior_samples) + self.design @ theta

    def observe(self, row: int, samples: float) -> Posterior:
        """The posterior after one more observation at row `row` (a rank-one update)."""
        h = self.design[row]
        ch = self.cov @ h
        denom = float(h @ ch) + self.noise_sd**2
        resid = math.log(samples) - math.log(self.prior_samples[row]) - float(h @ self.mean)
        cov = self.cov - np.outer(ch, ch) / denom
        observed = self.observed.copy()
        observed[row] += 1
        return Posterior(
            batch_sizes=self.batch_sizes,
            prior_samples=self.prior_samples,
            design=self.design,
            mean=self.mean + ch * (resid / denom),
            cov=(cov + cov.T) / 2,
            observed=observed,
            noise_sd=self.noise_sd,
        )


def normalised(log_n: NDArray[np.float64]) -> NDArray[np.float64]:
    """exp(log N − max log N): r in (0, 1]."""
    return np.exp(log_n - np.max(log_n))


def centred_log2(batch_sizes: Sequence[int]) -> NDArray[np.float64]:
    """`log2 b` minus its mean over the batch sizes (the pivot only matters for a proper scale
    prior: under the flat one, the scale absorbs any pivot)."""
    x = np.log2(np.asarray(batch_sizes, dtype=np.float64))
    centred: NDArray[np.float64] = x - x.mean()
    return centred


def _check(bs: NDArray[np.int64], n_prior: NDArray[np.float64]) -> None:
    if bs.ndim != 1 or bs.size == 0 or n_prior.shape != bs.shape:
        raise ValueError("batch_sizes and prior_samples must be equal-length, non-empty 1-D")
    if np.any(bs <= 0) or len(set(bs.tolist())) != bs.size:
        raise ValueError(f"batch sizes must be distinct and > 0, got {bs.tolist()}")
    if not np.all(np.isfinite(n_prior) & (n_prior > 0)):
        raise ValueError(f"prior samples must be finite and > 0, got {n_prior.tolist()}")


def posterior(
    batch_sizes: Sequence[int],
    prior_samples: Sequence[float],
    observations: Sequence[tuple[int, float]],
    prior: HistoryPrior = HistoryPrior(),
    shape: Sequence[float] | None = None,
) -> Posterior:
    """The posterior of N(b) given the proxy's N(b), (batch size, samples to target) pairs and,
    where both noise scales were measured, their shape difference `g_b` per batch size.

    Observations at a batch size outside `batch_sizes` are ignored (the caller warns).
    """
    bs = np.asarray(batch_sizes, dtype=np.int64)
    n_prior = np.asarray(prior_samples, dtype=np.float64)
    _check(bs, n_prior)
    size = bs.size
    g = np.zeros(size) if shape is None else np.asarray(shape, dtype=np.float64)
    if g.shape != (size,) or not np.all(np.isfinite(g)):
        raise ValueError(f"shape must be {size} finite numbers, got {g.tolist()}")
    design = np.hstack(
        [np.ones((size, 1)), centred_log2(bs.tolist())[:, None], g[:, None], np.eye(size)]
    )
    scale_sd = FLAT_SCALE_SD if prior.scale_sd is None else prior.scale_sd
    precision = np.diag(
        [scale_sd**-2, prior.slope_sd**-2, prior.shape_sd**-2, *([prior.size_sd**-2] * size)]
    )
    prior_mean = np.zeros(design.shape[1])
    prior_mean[TILT], prior_mean[SHAPE] = prior.slope_mean, 1.0
    cov = np.linalg.inv(precision)
    post = Posterior(
        batch_sizes=bs,
        prior_samples=n_prior,
        design=design,
        mean=prior_mean,
        cov=(cov + cov.T) / 2,
        observed=np.zeros(size, dtype=np.int64),
        noise_sd=prior.noise_sd,
    )
    row_of = {int(b): i for i, b in enumerate(bs)}
    for b, n in observations:
        if int(b) not in row_of:
            continue
        if not (math.isfinite(n) and n > 0):
            raise ValueError(f"an observed sample count must be finite and > 0, got {n}")
        post = post.observe(row_of[int(b)], float(n))
    return post


def choose_r(
    post: Posterior,
    chooser: Chooser = Chooser.mean,
    rng: np.random.Generator | None = None,
    *,
    kappa: float = 1.0,
) -> NDArray[np.float64]:
    """The r the plan uses, per batch size, in (0, 1].

    `mean` (what jobs use) is the posterior mean. The others are the bench's comparisons: with no
    observations they are the mean too; `thompson` draws one N(b) (seeded `rng`), `lcb` takes
    `mean − κ·sd` of log N relative to the most tried size.
    """
    if post.observations == 0 or chooser is Chooser.mean:
        return post.r()
    if chooser is Chooser.lcb:
        return normalised(post.log_samples() - kappa * post.relative_log_sd())
    if rng is None:
        raise ValueError("Thompson sampling needs a seeded rng (reproducible plans)")
    return normalised(post.draw_log_samples(rng))


def planning_vector(
    prior: EfficiencyVector, post: Posterior, r: NDArray[np.float64]
) -> EfficiencyVector:
    """The efficiency vector the plan reads: `r` on the prior's batch sizes, scaled to the
    posterior's N so `predicted_seconds` stays in samples; null where the proxy never reached
    the target (excluded, as before)."""
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
    ).model_copy(update={"seeds": prior.seeds, "gradient_noise_scale": prior.gradient_noise_scale})


#: What a job uses (and the bench's recurring column): the posterior mean, the gate on top.
DEFAULT_CHOOSER = Chooser.mean


__all__ = [
    "DEFAULT_CHOOSER",
    "FLAT_SCALE_SD",
    "Chooser",
    "HistoryPrior",
    "Posterior",
    "centred_log2",
    "choose_r",
    "normalised",
    "planning_vector",
    "posterior",
]
