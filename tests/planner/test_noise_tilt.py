"""The gradient noise scale's arithmetic (unbiased from micro-batch norms, the empirical model's
shape) and the population tilt prior (pooled pairs, trusted from 6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.planner.noise import (
    NoiseSample,
    fit_samples_shape,
    gradient_estimates,
    log_samples_shape,
    noise_scale,
    shape_difference,
)
from edgetrain.planner.tilt import MIN_PAIRS, MIN_SD, TiltPair, pair_tilt, population_tilt


def test_micro_batch_norms_give_unbiased_gradient_and_trace() -> None:
    """Per-sample gradients G + noise (covariance Σ): k micro-batch means and their mean give
    |G|² and tr(Σ) on average, hence B_simple = tr(Σ)/|G|²."""
    rng = np.random.default_rng(0)
    g = rng.normal(size=50)
    sd = rng.uniform(0.5, 3.0, size=50)
    batch, k = 32, 4
    est = []
    for _ in range(4000):
        per_sample = g + rng.normal(size=(batch, 50)) * sd
        micro = per_sample.reshape(k, batch // k, 50).mean(axis=1)
        small = float((micro**2).sum(axis=1).mean())
        big = float((micro.mean(axis=0) ** 2).sum())
        est.append(gradient_estimates(small, big, batch // k, batch))
    grad_sq, trace = np.mean(est, axis=0)
    assert grad_sq == pytest.approx(float(g @ g), rel=0.05)
    assert trace == pytest.approx(float((sd**2).sum()), rel=0.05)
    got = noise_scale([NoiseSample(i, a, b) for i, (a, b) in enumerate(est)], warmup_share=0.0)
    assert got == pytest.approx(float((sd**2).sum() / (g @ g)), rel=0.08)


def test_noise_scale_uses_the_later_measurements_and_refuses_nonsense() -> None:
    early = [NoiseSample(s, 1.0, 1.0) for s in (100, 200)]
    late = [NoiseSample(s, 1.0, 10.0) for s in (600, 800, 1000)]
    assert noise_scale([*early, *late], warmup_share=0.5) == pytest.approx(10.0)
    assert noise_scale([]) is None
    assert noise_scale([NoiseSample(1, -1.0, 1.0)]) is None
    with pytest.raises(ValueError, match="small batch"):
        gradient_estimates(1.0, 1.0, 8, 8)


@settings(max_examples=50, deadline=None)
@given(st.floats(min_value=4.0, max_value=500.0), st.floats(min_value=1e3, max_value=1e5))
def test_the_empirical_model_is_recovered_from_its_own_shape(b_noise: float, e_min: float) -> None:
    bs = [4, 8, 16, 32, 64, 128]
    samples = e_min * np.exp(log_samples_shape(bs, b_noise))
    fit = fit_samples_shape(bs, samples.tolist())
    assert fit.rms_log_residual < 0.01
    assert fit.e_min == pytest.approx(e_min, rel=0.05)


def test_a_noisier_target_makes_large_batches_relatively_cheaper() -> None:
    g = shape_difference([4, 16, 64, 256], target_b_noise=200.0, proxy_b_noise=50.0)
    assert np.all(np.diff(g) < 0) and g[0] < 0


def test_pair_tilt_is_the_slope_per_doubling() -> None:
    bs = [4, 8, 16, 32]
    proxy = [1000.0, 1000.0, 1000.0, 1000.0]
    target = [1000.0 * math.exp(-0.1 * i) for i in range(4)]
    assert pair_tilt(bs, proxy, target) == pytest.approx(-0.1)
    assert pair_tilt(bs, proxy, [None, None, 1.0, None]) is None


def test_the_population_is_trusted_from_min_pairs() -> None:
    few = [TiltPair(f"p{i}", -0.05) for i in range(MIN_PAIRS - 1)]
    prior = population_tilt(few)
    assert not prior.trusted and prior.mean == 0.0 and prior.sd == 0.2
    many = [TiltPair(f"p{i}", t) for i, t in enumerate([-0.1, -0.05, 0.0, -0.02, -0.08, -0.06])]
    prior = population_tilt(many)
    assert prior.trusted and prior.pairs == 6
    assert prior.mean == pytest.approx(np.mean([p.tilt for p in many]))
    assert prior.sd == pytest.approx(np.std([p.tilt for p in many], ddof=1) * math.sqrt(7 / 6))
    same = population_tilt([TiltPair(f"p{i}", -0.05) for i in range(8)])
    assert same.sd == MIN_SD  # agreeing pairs never make the next one certain
