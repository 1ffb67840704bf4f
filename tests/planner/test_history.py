"""The posterior r of recurring jobs: the prior without observations, no tilt from where a size
sits in the grid, convergence to what is observed, wider doubt where nothing was tried, the
population tilt and the noise-scale shape, and choosers that are reproducible."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.planner.history import (
    SHAPE,
    SIZES,
    Chooser,
    HistoryPrior,
    choose_r,
    posterior,
)

BATCHES = [4, 8, 16, 32, 64, 128]
PRIOR_N = [30_000.0, 22_000.0, 21_000.0, 24_000.0, 31_000.0, 41_000.0]

prior_samples = st.lists(
    st.floats(min_value=1e3, max_value=1e6), min_size=len(BATCHES), max_size=len(BATCHES)
)
observation = st.tuples(st.sampled_from(BATCHES), st.floats(min_value=1e3, max_value=1e6))


@settings(max_examples=200, deadline=None)
@given(prior_samples)
def test_no_observations_is_the_prior(prior: list[float]) -> None:
    post = posterior(BATCHES, prior, [])
    np.testing.assert_allclose(post.r(), np.array(prior) / max(prior), rtol=1e-12)
    for chooser in Chooser:
        r = choose_r(post, chooser, np.random.default_rng(0))
        np.testing.assert_allclose(r, np.array(prior) / max(prior), rtol=1e-12)


@settings(max_examples=300, deadline=None)
@given(
    prior_samples,
    st.sampled_from(BATCHES),
    st.lists(st.floats(min_value=1e3, max_value=1e6), min_size=1, max_size=10),
)
def test_observations_at_one_size_never_move_the_posterior_mean_r(
    prior: list[float], b: int, observed: list[float]
) -> None:
    """Bandit feedback at one size says how hard the target is, never which size is best: under
    the flat scale prior the posterior mean r is the prior's, wherever b sits in the grid."""
    post = posterior(BATCHES, prior, [(b, n) for n in observed])
    np.testing.assert_allclose(post.r(), np.array(prior) / max(prior), rtol=1e-6)
    # ... and the scale is learned: N at b follows the observations.
    geo = math.exp(float(np.mean(np.log(observed))))
    assert post.samples()[BATCHES.index(b)] == pytest.approx(geo, rel=0.5)


def test_the_centred_design_tilt_artefact_is_gone() -> None:
    """Issue 41: under issue 30's proper scale prior and centred design, one observation of a
    harder target tilted the other sizes one way at b = 8 and the other way at b = 32."""
    old = HistoryPrior(scale_sd=1.0)
    ratios = {}
    for b in (8, 32):
        harder = [(b, 2 * PRIOR_N[BATCHES.index(b)])]
        tilted = posterior(BATCHES, PRIOR_N, harder, old).r() / (np.array(PRIOR_N) / 41_000.0)
        ratios[b] = tilted[-1] / tilted[0]  # how b = 128 moved against b = 4
        flat = posterior(BATCHES, PRIOR_N, harder).r()
        np.testing.assert_allclose(flat, np.array(PRIOR_N) / max(PRIOR_N), rtol=1e-6)
    assert (ratios[8] - 1) * (ratios[32] - 1) < 0  # opposite signs: the artefact


@settings(max_examples=100, deadline=None)
@given(prior_samples, st.sampled_from(BATCHES), st.floats(min_value=1e3, max_value=1e6))
def test_many_observations_converge_to_the_observed_n(
    prior: list[float], b: int, observed: float
) -> None:
    post = posterior(BATCHES, prior, [(b, observed)] * 2000)
    i = BATCHES.index(b)
    assert post.samples()[i] == pytest.approx(observed, rel=0.01)
    assert post.log_sd()[i] < 0.01


@settings(max_examples=200, deadline=None)
@given(prior_samples, st.lists(observation, min_size=1, max_size=12))
def test_never_tried_sizes_keep_their_prior_doubt(
    prior: list[float], observations: list[tuple[int, float]]
) -> None:
    hyper = HistoryPrior()
    post = posterior(BATCHES, prior, observations, hyper)
    tried = {b for b, _ in observations}
    for i, b in enumerate(BATCHES):
        # δ_b of a size never tried is untouched by any observation: its sd stays the prior's.
        delta_sd = math.sqrt(post.cov[SIZES + i, SIZES + i])
        if b in tried:
            assert delta_sd < hyper.size_sd
        else:
            assert delta_sd == pytest.approx(hyper.size_sd, rel=1e-6)


@pytest.mark.parametrize(
    ("observations", "cheaper", "dearer"),
    [
        # The target set needs fewer samples at large b than the proxy said: the tilt is learned
        # from two sizes and carries to the sizes between and beyond them.
        ([(4, 60_000.0), (64, 31_000.0)], 128, 4),
        # ... and the other way round.
        ([(4, 30_000.0), (64, 62_000.0)], 8, 128),
    ],
)
def test_a_tilt_learned_at_two_sizes_pools_across_sizes(
    observations: list[tuple[int, float]], cheaper: int, dearer: int
) -> None:
    post = posterior(BATCHES, PRIOR_N, observations)
    ratio = post.r() / (np.array(PRIOR_N) / max(PRIOR_N))
    assert ratio[BATCHES.index(cheaper)] < ratio[BATCHES.index(dearer)]


def test_a_population_tilt_prior_tilts_the_first_plan() -> None:
    """A negative prior tilt (harder targets favour larger batches) moves r before any
    observation; a same-size observation then moves nothing more."""
    hyper = HistoryPrior(slope_mean=-0.1, slope_sd=0.03)
    post = posterior(BATCHES, PRIOR_N, [], hyper)
    ratio = post.r() / (np.array(PRIOR_N) / max(PRIOR_N))
    assert np.all(np.diff(ratio) < 0)
    assert ratio[-1] / ratio[0] == pytest.approx(math.exp(-0.1 * 5), rel=1e-9)
    after = posterior(BATCHES, PRIOR_N, [(16, 50_000.0)] * 3, hyper)
    np.testing.assert_allclose(after.r(), post.r(), rtol=1e-6)


def test_the_noise_scale_shape_enters_with_its_weight() -> None:
    shape = np.log1p(np.array(BATCHES) / 400.0) - np.log1p(np.array(BATCHES) / 100.0)
    post = posterior(BATCHES, PRIOR_N, [], HistoryPrior(), shape.tolist())
    assert post.mean[SHAPE] == 1.0  # the prior's weight
    expected = np.array(PRIOR_N) * np.exp(shape)
    np.testing.assert_allclose(post.r(), expected / expected.max(), rtol=1e-9)
    with pytest.raises(ValueError, match="shape"):
        posterior(BATCHES, PRIOR_N, [], HistoryPrior(), [0.0, 1.0])


def test_observe_is_the_batch_posterior() -> None:
    obs = [(4, 40_000.0), (64, 30_000.0), (16, 25_000.0)]
    batch = posterior(BATCHES, PRIOR_N, obs)
    step = posterior(BATCHES, PRIOR_N, [])
    for b, n in obs:
        step = step.observe(BATCHES.index(b), n)
    np.testing.assert_allclose(step.log_samples(), batch.log_samples(), rtol=1e-9)
    np.testing.assert_allclose(step.relative_log_sd(), batch.relative_log_sd(), rtol=1e-6)


def test_thompson_is_reproducible_and_explores() -> None:
    post = posterior(BATCHES, PRIOR_N, [(16, 40_000.0)])
    draws = [choose_r(post, Chooser.thompson, np.random.default_rng(s)) for s in range(200)]
    again = [choose_r(post, Chooser.thompson, np.random.default_rng(s)) for s in range(200)]
    np.testing.assert_array_equal(np.array(draws), np.array(again))
    assert len({BATCHES[int(np.argmin(r))] for r in draws}) >= 3
    assert all(np.all((r > 0) & (r <= 1)) for r in draws)
    with pytest.raises(ValueError, match="seeded rng"):
        choose_r(post, Chooser.thompson, None)


def test_lcb_is_optimistic_about_the_untried() -> None:
    post = posterior(BATCHES, PRIOR_N, [(16, 30_000.0)] * 5)
    mean_r, lcb_r = choose_r(post, Chooser.mean), choose_r(post, Chooser.lcb, kappa=2.0)
    i16 = BATCHES.index(16)
    for i in range(len(BATCHES)):
        if i != i16:
            assert lcb_r[i] / lcb_r[i16] < mean_r[i] / mean_r[i16]


def test_the_doubt_relative_to_the_most_tried_size_grows_with_distance_in_log_b() -> None:
    post = posterior(BATCHES, PRIOR_N, [(8, 60_000.0)] * 20)
    rel = post.relative_log_sd()
    assert rel[BATCHES.index(8)] == pytest.approx(0.0, abs=1e-6)
    right = rel[BATCHES.index(8) :]
    assert np.all(np.diff(right) > 0) and rel[0] > 0


@pytest.mark.parametrize(
    ("batch_sizes", "prior", "message"),
    [
        ([], [], "non-empty"),
        ([4, 4], [1.0, 2.0], "distinct"),
        ([4, 8], [1.0, 0.0], "finite and > 0"),
        ([4, 8], [1.0, math.nan], "finite and > 0"),
    ],
)
def test_bad_prior_is_named(batch_sizes: list[int], prior: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        posterior(batch_sizes, prior, [])


def test_bad_observation_and_hyperparameters_are_named() -> None:
    with pytest.raises(ValueError, match="observed sample count"):
        posterior(BATCHES, PRIOR_N, [(16, -1.0)])
    with pytest.raises(ValueError, match="noise_sd"):
        HistoryPrior(noise_sd=0.0)
    with pytest.raises(ValueError, match="scale_sd"):
        HistoryPrior(scale_sd=-1.0)
    # A size outside the vector is ignored, not an error (the caller warns).
    assert posterior(BATCHES, PRIOR_N, [(256, 1e4)]).observations == 0
