"""The gradient noise scale (McCandlish et al. 2018, "An Empirical Model of Large-Batch
Training") from micro-batch gradient norms, and the shape of N(b) it predicts (numpy, no I/O).

Their empirical model: samples to a given loss trade against steps as `E = E_min (1 + B/B_noise)`,
so `log N(b) = log E_min + log(1 + b/B_noise)`. `B_noise` is estimated by the simple noise scale
`B_simple = tr(Σ) / |G|²` (Σ the per-sample gradient covariance, G the true gradient), from the
squared norms of gradients averaged over two batch sizes (their Appendix A.1): no per-sample
gradients are needed, only k micro-batch gradients of one minibatch and their mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

#: The share of a run's first measurements left out: B_simple grows as the loss falls, and the
#: part of the run that decides N is the part near the target.
WARMUP_SHARE = 0.25


@dataclass(frozen=True)
class NoiseSample:
    """One measurement at `samples`: unbiased estimates of |G|² and tr(Σ)."""

    samples: int
    grad_sq: float
    trace: float


def gradient_estimates(
    small_sq: float, big_sq: float, small_batch: int, big_batch: int
) -> tuple[float, float]:
    """Unbiased |G|² and tr(Σ) from the mean squared gradient norm at two batch sizes.

    `E|G_B|² = |G|² + tr(Σ)/B`, so two batch sizes give both (McCandlish et al., eqs. A.2–A.3).
    """
    if not 0 < small_batch < big_batch:
        raise ValueError(f"need 0 < small batch < big batch, got {small_batch}, {big_batch}")
    grad_sq = (big_batch * big_sq - small_batch * small_sq) / (big_batch - small_batch)
    trace = (small_sq - big_sq) / (1.0 / small_batch - 1.0 / big_batch)
    return grad_sq, trace


def noise_scale(
    measured: Sequence[NoiseSample], warmup_share: float = WARMUP_SHARE
) -> float | None:
    """B_simple over a run: Σ tr(Σ) / Σ |G|² over the measurements after the warm-up share of
    the run (a ratio of sums: each estimate alone is noisy and may be negative). None when
    nothing usable was measured."""
    if not measured:
        return None
    last = max(m.samples for m in measured)
    kept = [m for m in measured if m.samples >= warmup_share * last] or list(measured)
    grad_sq = sum(m.grad_sq for m in kept)
    trace = sum(m.trace for m in kept)
    if not (math.isfinite(grad_sq) and math.isfinite(trace)) or grad_sq <= 0 or trace <= 0:
        return None
    return trace / grad_sq


def log_samples_shape(
    batch_sizes: Sequence[int] | NDArray[np.float64], b_noise: float
) -> NDArray[np.float64]:
    """`log(1 + b/B_noise)`: the empirical model's log N(b) up to its constant."""
    b = np.asarray(batch_sizes, dtype=np.float64)
    shape: NDArray[np.float64] = np.log1p(b / b_noise)
    return shape


def shape_difference(
    batch_sizes: Sequence[int], target_b_noise: float, proxy_b_noise: float
) -> NDArray[np.float64]:
    """How the target's log N(b) differs in shape from the proxy's, as the noise scales predict:
    `log(1 + b/B_target) − log(1 + b/B_proxy)`. A noisier target (larger B) makes large batches
    relatively cheaper: the difference falls with b."""
    return log_samples_shape(batch_sizes, target_b_noise) - log_samples_shape(
        batch_sizes, proxy_b_noise
    )


@dataclass(frozen=True)
class ShapeFit:
    """The empirical model fitted to a measured N(b): E_min, B_noise and how well it fits."""

    e_min: float
    b_noise: float
    rms_log_residual: float
    residuals: tuple[float, ...]


def fit_samples_shape(batch_sizes: Sequence[int], samples: Sequence[float]) -> ShapeFit:
    """Least squares of `log N(b) = log E_min + log(1 + b/B)` over a log grid of B (the one
    nonlinear parameter), E_min closed-form for each."""
    b = np.asarray(batch_sizes, dtype=np.float64)
    y = np.log(np.asarray(samples, dtype=np.float64))
    if b.size < 2 or y.shape != b.shape or not np.all(np.isfinite(y)):
        raise ValueError("need ≥ 2 batch sizes with finite samples")
    best: ShapeFit | None = None
    for b_noise in np.geomspace(b.min() / 64, b.max() * 64, 400):
        shape = log_samples_shape(b, float(b_noise))
        log_e = float(np.mean(y - shape))
        res = y - log_e - shape
        rms = float(np.sqrt(np.mean(res**2)))
        if best is None or rms < best.rms_log_residual:
            best = ShapeFit(math.exp(log_e), float(b_noise), rms, tuple(float(r) for r in res))
    assert best is not None
    return best


__all__ = [
    "WARMUP_SHARE",
    "NoiseSample",
    "ShapeFit",
    "fit_samples_shape",
    "gradient_estimates",
    "log_samples_shape",
    "noise_scale",
    "shape_difference",
]
