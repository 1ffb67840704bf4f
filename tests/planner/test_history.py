"""The posterior r of recurring jobs: prior without observations, convergence to what is
observed, wider doubt where nothing was tried, and choosers that are reproducible."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.history import EfficiencyObservation, ObservationPool
from edgetrain.planner.history import Chooser, HistoryPrior, choose_r, learn, posterior

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
    np.testing.assert_allclose(post.samples(), prior, rtol=1e-12)
    np.testing.assert_allclose(post.r(), np.array(prior) / max(prior), rtol=1e-12)
    for chooser in Chooser:
        r = choose_r(post, chooser, np.random.default_rng(0))
        np.testing.assert_allclose(r, np.array(prior) / max(prior), rtol=1e-12)


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
    rel = post.relative_log_sd()
    for i, b in enumerate(BATCHES):
        # δ_b of a size never tried is untouched by any observation: its sd stays the prior's.
        delta_sd = math.sqrt(post.cov[2 + i, 2 + i])
        if b in tried:
            assert delta_sd < hyper.size_sd
        else:
            assert delta_sd == pytest.approx(hyper.size_sd, rel=1e-9)
            assert rel[i] >= hyper.size_sd * (1 - 1e-9)
    assert max(rel[BATCHES.index(b)] for b in tried) < max(rel) or len(tried) == len(BATCHES)


def test_observations_more_than_the_prior_reduce_the_doubt_everywhere() -> None:
    before = posterior(BATCHES, PRIOR_N, [(16, 40_000.0)])
    after = posterior(BATCHES, PRIOR_N, [(16, 40_000.0), (64, 50_000.0), (16, 41_000.0)])
    assert np.all(after.log_sd() <= before.log_sd() + 1e-12)


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
    prior_r = np.array(PRIOR_N) / max(PRIOR_N)
    ratio = post.r() / prior_r
    assert ratio[BATCHES.index(cheaper)] < ratio[BATCHES.index(dearer)]


def test_one_observation_sets_the_scale_not_the_ranking() -> None:
    # Bandit feedback at one size says how hard the target set is, hardly which size is best.
    post = posterior(BATCHES, PRIOR_N, [(16, 2 * 21_000.0)])
    assert post.samples()[BATCHES.index(16)] > 1.5 * 21_000
    prior_r = np.array(PRIOR_N) / max(PRIOR_N)
    np.testing.assert_allclose(post.r(), prior_r, rtol=0.1)
    assert int(np.argmin(post.r())) == int(np.argmin(prior_r))


def test_thompson_is_reproducible_and_explores() -> None:
    post = posterior(BATCHES, PRIOR_N, [(16, 40_000.0)])
    draws = [choose_r(post, Chooser.thompson, np.random.default_rng(s)) for s in range(200)]
    again = [choose_r(post, Chooser.thompson, np.random.default_rng(s)) for s in range(200)]
    np.testing.assert_array_equal(np.array(draws), np.array(again))
    best = {BATCHES[int(np.argmin(r))] for r in draws}
    assert len(best) >= 3  # several sizes get their turn while the prior is uncertain
    assert all(np.all((r > 0) & (r <= 1)) for r in draws)
    with pytest.raises(ValueError, match="seeded rng"):
        choose_r(post, Chooser.thompson, None)


def test_lcb_is_optimistic_about_the_untried() -> None:
    post = posterior(BATCHES, PRIOR_N, [(16, 30_000.0)] * 5)
    mean_r, lcb_r = choose_r(post, Chooser.mean), choose_r(post, Chooser.lcb, kappa=2.0)
    i16 = BATCHES.index(16)
    # Relative to b = 16 (tried, little doubt), every untried size looks cheaper under LCB.
    for i in range(len(BATCHES)):
        if i != i16:
            assert lcb_r[i] / lcb_r[i16] < mean_r[i] / mean_r[i16]


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
    # A size outside the vector is ignored, not an error (the caller warns).
    assert posterior(BATCHES, PRIOR_N, [(256, 1e4)]).observations == 0


def _pool(*pairs: tuple[int, float]) -> ObservationPool:
    key = "k"
    return ObservationPool(
        used=[
            EfficiencyObservation(
                key=key,
                model="m",
                dataset="d",
                target_accuracy=0.8,
                batch_size=b,
                samples_to_accuracy=n,
                reached_target=True,
                weights=None,
                seed=0,
                job=f"j{i}",
            )
            for i, (b, n) in enumerate(pairs)
        ],
        skipped={"bad.json": "not valid JSON"},
    )


def test_learn_shows_prior_observations_and_posterior_and_plans_from_them() -> None:
    prior = EfficiencyVector.from_samples(
        model="m",
        dataset="proxy",
        target_accuracy=0.8,
        batch_sizes=[*BATCHES, 256],
        samples_to_accuracy=[*PRIOR_N, None],
    )
    vector, status = learn(prior, _pool(), "k")
    assert vector.r == pytest.approx(prior.r) and status.observations_total == 0
    assert status.chooser.startswith("prior") and status.skipped == ["bad.json: not valid JSON"]

    vector, status = learn(prior, _pool((4, 60_000.0), (64, 31_000.0)), "k")
    assert status.batch_sizes == BATCHES and status.observations_total == 2
    assert [o.batch_size for o in status.observations] == [4, 64]
    assert status.prior_r == pytest.approx(list(np.array(PRIOR_N) / max(PRIOR_N)))
    assert status.posterior_r != pytest.approx(status.prior_r)
    assert vector.r[:-1] == pytest.approx(status.planned_r) and vector.r[-1] is None


def test_the_doubt_relative_to_the_most_tried_size_grows_with_distance_in_log_b() -> None:
    # However often b = 8 was seen, it says nothing about how 128 compares: repeating the same
    # size must not make a bound stop exploring (the common scale is taken out).
    post = posterior(BATCHES, PRIOR_N, [(8, 60_000.0)] * 20)
    rel = post.relative_log_sd()
    assert rel[BATCHES.index(8)] == pytest.approx(0.0, abs=1e-9)
    right = rel[BATCHES.index(8) :]
    assert np.all(np.diff(right) > 0) and rel[0] > 0
