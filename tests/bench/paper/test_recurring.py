"""The recurring column: bandit feedback without leaks, learning that works where it can, and
the committed cpu run's column recomputed from its own recorded N(b)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from edgetrain.bench.paper.config import BenchConfig, cpu_config
from edgetrain.bench.paper.estimates import estimate_key
from edgetrain.bench.paper.evaluate import truth_lut, twin_shape
from edgetrain.bench.paper.recurring import recurring_all, recurring_cell, recurring_stats
from edgetrain.bench.paper.results import EstimateRecord, PaperBenchSummary, RecurringJob

COMMITTED = Path(__file__).resolve().parents[3] / "docs/benchmarks/paper/cpu.json"


def _estimates(run: PaperBenchSummary) -> dict[str, EstimateRecord]:
    by_identity = {(e.model, e.dataset, e.seed): e for e in run.estimates}
    return {
        estimate_key(w, ref, seed): by_identity[(w.model, ref.name, seed)]
        for w in run.config.workloads
        for ref in w.datasets
        for seed in run.config.seeds
    }


@pytest.fixture(scope="module")
def committed() -> PaperBenchSummary:
    return PaperBenchSummary.model_validate_json(COMMITTED.read_text())


def test_the_committed_column_is_what_the_code_computes_from_the_recorded_n(
    committed: PaperBenchSummary,
) -> None:
    assert committed.headline is not None and committed.recurring
    jobs = recurring_all(committed.config, _estimates(committed))
    assert jobs == committed.recurring
    per_k = committed.headline.recurring_over_oracle
    assert [s.k for s in per_k] == [1, 2, 3, 4, 5]
    assert per_k == recurring_stats(jobs)
    assert all(s.mean is not None and s.ci95 is not None and s.n == 5 for s in per_k)
    # Job 1 has no observations: it is the main table's edgetrain case of its seed.
    assert per_k[0].mean == pytest.approx(committed.headline.edgetrain_over_oracle.mean)
    assert committed.reevaluated and "no training" in committed.reevaluated


def test_each_job_sees_only_earlier_jobs_at_their_batch_size_and_is_judged_on_its_own_seed(
    committed: PaperBenchSummary,
) -> None:
    targets = {(e.model, e.dataset, e.seed): e for e in committed.estimates}
    sequences: dict[tuple[str, str, float | None, int], list[RecurringJob]] = {}
    for job in committed.recurring:
        key = (job.workload, job.board, job.power_limit_w, job.sequence)
        sequences.setdefault(key, []).append(job)
    assert len(sequences) == 27 * 5
    for jobs in sequences.values():
        assert [j.k for j in jobs] == [1, 2, 3, 4, 5]
        assert len({j.seed for j in jobs}) == 5  # every job judged on a seed of its own
        assert jobs[0].seed == jobs[0].sequence
        w = next(w for w in committed.config.workloads if w.label == jobs[0].workload)
        for job in jobs:
            assert job.batch_size is not None
            target = targets[(w.model, job.target, job.seed)]
            # Bandit feedback: one number, its own seed's N at the batch size it ran.
            n = target.samples_to_accuracy[target.batch_sizes.index(job.batch_size)]
            assert job.observed_samples == n


def _record(model: str, dataset: str, seed: int, samples: list[float]) -> EstimateRecord:
    w = cpu_config().workloads[0]
    return EstimateRecord(
        model=model, dataset=dataset, dataset_limit=None, target_accuracy=0.8,
        batch_sizes=w.batch_sizes, optimizer=w.optimizer, sample_budget=w.sample_budget,
        eval_interval_samples=1024, eval_samples=None, seed=seed, samples_to_accuracy=samples,
        wall_s=0.0,
    )  # fmt: skip


def test_a_proxy_that_ranks_batch_sizes_wrongly_is_corrected_by_history() -> None:
    """The proxy favours small batches; on the target set large ones need far fewer samples, the
    same in every seed. Learning must close most of job 1's gap by job 5."""
    config = cpu_config()
    w = config.workloads[0]  # resnet18 twin, b = 4 … 128
    board = config.boards[0]
    config = BenchConfig.model_validate(
        {**config.model_dump(), "workloads": [w.model_dump()], "boards": [board.model_dump()]}
    )
    proxy_n = [20_000.0, 22_000.0, 26_000.0, 30_000.0, 36_000.0, 44_000.0]
    target_n = [80_000.0, 60_000.0, 42_000.0, 30_000.0, 24_000.0, 20_000.0]
    estimates = {}
    for seed in config.seeds:
        proxy, target = w.dataset(w.proxy), w.dataset(w.targets[0])
        estimates[estimate_key(w, proxy, seed)] = _record(w.model, proxy.name, seed, proxy_n)
        estimates[estimate_key(w, target, seed)] = _record(w.model, target.name, seed, target_n)
    model, shape, classes = twin_shape(w)
    truth = truth_lut(board.board, model, shape, classes, w.batch_sizes)
    jobs = recurring_cell(
        config, w, w.targets[0], board.board, None, truth, estimates, config.recurring
    )
    by_k = {
        k: statistics.fmean(j.over_oracle for j in jobs if j.k == k and j.over_oracle)
        for k in range(1, 6)
    }
    assert by_k[1] > 1.2, by_k  # the proxy's plan is far off
    assert by_k[5] < 1 + (by_k[1] - 1) / 3, by_k
    for k in range(1, 6):  # without learning, every job repeats job 1's plan
        static = [j.static_over_oracle for j in jobs if j.k == k and j.static_over_oracle]
        assert statistics.fmean(static) == pytest.approx(by_k[1])
    # Without any seed noise, the leave-one-out floor is the oracle itself.
    assert all(j.informed_over_oracle == pytest.approx(1.0) for j in jobs)
