"""A recurring job's plan input: the posterior from its sources, gated on a profile, and the
status that says where r came from and whether the gate explored."""

from __future__ import annotations

import numpy as np
import pytest

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.history import EfficiencyObservation, ObservationPool
from edgetrain.planner.gate import GateSettings
from edgetrain.planner.learn import (
    history_pair,
    learn,
    noise_shape,
    observation_extras,
    plan_vector,
)
from edgetrain.planner.synthetic import synthetic_lut
from edgetrain.planner.tilt import TiltPair, population_tilt

BATCHES = [4, 8, 16, 32, 64, 128]
PRIOR_N = [30_000.0, 22_000.0, 21_000.0, 24_000.0, 31_000.0, 41_000.0]
PRIOR = EfficiencyVector.from_samples(
    model="m", dataset="proxy", target_accuracy=0.8, batch_sizes=[*BATCHES, 256],
    samples_to_accuracy=[*PRIOR_N, None],
).model_copy(update={"seeds": 3, "gradient_noise_scale": [50.0] * 6 + [None]})  # fmt: skip


def _obs(i: int, b: int, n: float, **extra: object) -> EfficiencyObservation:
    return EfficiencyObservation.model_validate({
        "key": "k", "model": "m", "dataset": "d", "target_accuracy": 0.8, "batch_size": b,
        "samples_to_accuracy": n, "reached_target": True, "weights": None, "seed": 0,
        "job": f"j{i}", **extra})  # fmt: skip


def _pool(*obs: EfficiencyObservation) -> ObservationPool:
    return ObservationPool(used=list(obs), skipped={"bad.json": "not valid JSON"})


def test_with_nothing_learned_the_plan_is_the_proxys_and_status_says_so() -> None:
    learned = learn(PRIOR, _pool(), "k")
    vector, status = plan_vector(learned, synthetic_lut(BATCHES, 6), 1e9)
    assert vector.r[:-1] == pytest.approx(PRIOR.r[:-1]) and vector.r[-1] is None
    assert status.skipped == ["bad.json: not valid JSON"] and status.observations_total == 0
    src = status.sources
    assert (src.proxy_seeds, src.observations, src.tilt_trusted) == (3, 0, False)
    assert src.noise_scale_proxy == pytest.approx(50.0) and not src.noise_shape_used
    assert status.gate is not None and not status.gate.explored
    assert status.gate.expected_recurrences == 10 and status.gate.alpha == 0.01
    assert vector.seeds == 3  # the plan's vector keeps where it came from


def test_a_trusted_tilt_prior_and_a_noise_scale_shape_the_plan() -> None:
    tilt = population_tilt([TiltPair(f"p{i}", -0.08) for i in range(6)])
    noisy = _obs(0, 16, 40_000.0, gradient_noise_scale=400.0)
    learned = learn(PRIOR, _pool(noisy), "k", tilt=tilt)
    src = learned.status.sources
    assert src.tilt_trusted and src.tilt_prior_mean == pytest.approx(-0.08)
    assert src.noise_shape_used and src.noise_scale_target == pytest.approx(400.0)
    ratio = np.array(learned.status.posterior_r) / np.array(learned.status.prior_r)
    assert np.all(np.diff(ratio) < 0)  # both say: larger batches relatively cheaper
    without = learn(PRIOR, _pool(noisy), "k", tilt=tilt, use_noise=False)
    assert not without.status.sources.noise_shape_used


def test_a_loose_gate_explores_one_doubling_and_status_shows_it() -> None:
    pool = _pool(*(_obs(i, 32, 24_000.0) for i in range(3)))
    lut = synthetic_lut(BATCHES, 6)
    _vector, tight = plan_vector(learn(PRIOR, pool, "k"), lut, 1e9)
    assert tight.gate is not None and not tight.gate.explored
    _vector, loose = plan_vector(learn(PRIOR, pool, "k"), lut, 1e9,
                                settings=GateSettings(100, alpha=10.0))  # fmt: skip
    gate = loose.gate
    assert gate is not None and gate.explored and "explores" in loose.chooser
    assert gate.candidate_batch_size in (gate.incumbent_batch_size * 2,
                                         gate.incumbent_batch_size // 2)  # fmt: skip
    extras = observation_extras(loose, 123.0)
    assert extras["explored"] and extras["explore_overrun"] == gate.pessimistic
    assert extras["gradient_noise_scale"] == 123.0 and extras["proxy_batch_sizes"] == BATCHES


def test_the_pool_counts_what_explorations_spent() -> None:
    pool = _pool(_obs(0, 16, 1e4, explored=True, explore_overrun=0.3), _obs(1, 16, 1e4))
    assert pool.spent() == pytest.approx(0.3)
    assert learn(PRIOR, pool, "k").spent == pytest.approx(0.3)


def test_a_history_spanning_two_sizes_is_a_tilt_pair() -> None:
    proxy = {"proxy_batch_sizes": [8, 32], "proxy_samples": [1.0, 1.0]}
    pool = _pool(_obs(0, 8, 1000.0, **proxy), _obs(1, 32, 1000.0 * np.exp(-0.2), **proxy))
    pair = history_pair(pool, "h")
    assert pair is not None and pair.tilt == pytest.approx(-0.1)
    assert history_pair(_pool(_obs(0, 8, 1000.0, **proxy)), "h") is None


def test_noise_shape_needs_both_scales() -> None:
    got = noise_shape([8, 16], [50.0, 50.0], [(8, 100.0)])
    assert got.shape is not None and got.target == pytest.approx(100.0)
    assert got.proxy == pytest.approx(50.0)
    assert noise_shape([8, 16], None, [(8, 100.0)]).shape is None
    assert noise_shape([8, 16], [50.0, 50.0], [(8, None)]).shape is None
