"""The synthetic-seed harness: a fit that keeps what the real seeds say, draws with misses past
the budget, and every policy judged on the same sequences in seconds."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from edgetrain.bench.paper import read_recorded
from edgetrain.bench.paper.config import Policy
from edgetrain.bench.paper.estimates import estimate_key
from edgetrain.bench.paper.synthetic import constant_correlation, draw, fit_dataset, synthetic

COMMITTED = Path(__file__).resolve().parents[3] / "docs/benchmarks/paper/cpu.json"


def test_the_fit_keeps_the_mean_and_the_common_part_of_the_seeds() -> None:
    run = read_recorded(COMMITTED.read_text())
    records = [e for e in run.estimates if (e.model, e.dataset) == ("resnet8-w025", "mnist")]
    fit = fit_dataset(records, 0.5, interpolated=False)
    logs = np.log([[n for n in r.samples_to_accuracy] for r in records])
    np.testing.assert_allclose(fit.mean, logs.mean(axis=0))
    assert np.all(np.linalg.eigvalsh(fit.cov) > 0)  # a proper Gaussian to draw from
    np.testing.assert_allclose(np.diag(fit.cov), logs.var(axis=0, ddof=1), rtol=1e-6)
    cov = np.array([[1.0, 0.5, 0.1], [0.5, 4.0, 0.4], [0.1, 0.4, 1.0]])
    target = constant_correlation(cov)
    np.testing.assert_allclose(np.diag(target), np.diag(cov))
    corr = target / np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
    assert corr[0, 1] == pytest.approx(corr[1, 2]) and corr[0, 1] > 0


def test_draws_pass_the_budget_as_misses() -> None:
    run = read_recorded(COMMITTED.read_text())
    records = [e for e in run.estimates if (e.model, e.dataset) == ("resnet8-w025", "mnist")]
    fit = fit_dataset(records, 0.5, interpolated=False)
    rng = np.random.default_rng(0)
    got = np.array([draw(fit, rng, 30_000.0) for _ in range(200)])
    assert np.isnan(got).any() and np.nanmax(got) <= 30_000.0
    assert np.nanmean(np.log(got[:, 2])) < math.log(30_000.0)


def test_every_policy_runs_the_same_sequences_and_the_default_never_hurts() -> None:
    run = read_recorded(COMMITTED.read_text())
    config = run.config
    by = {(e.model, e.dataset, e.seed): e for e in run.estimates}
    estimates = {estimate_key(w, ref, s): by[(w.model, ref.name, s)]
                 for w in config.workloads for ref in w.datasets for s in config.seeds}
    policies = [Policy(), Policy(name="one seed, no learning", proxy_seeds=1, learn=False)]
    got = synthetic(config, estimates, policies, seeds=12, horizon=6)
    assert got.sequences == 12 * 27 and got.seeds == 12 and got.horizon == 6
    default, single = got.policies
    assert [k.k for k in default.per_k] == list(range(1, 7))
    assert all(k.n == 12 and k.ci95 is not None for k in default.per_k)
    if default.explored == 0:  # nothing explored: every job is job 1's plan, exactly
        assert all(k.mean == 0.0 for k in default.gain_per_k)
        assert default.regret == pytest.approx(default.static_regret)
    assert single.gain_2_5.mean == 0.0
    assert got.quantisation_cost is not None and got.quantisation_cost.n == 12
