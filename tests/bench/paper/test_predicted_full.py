"""The full and predicted columns of `bench paper` on fake estimates (no real training)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from edgetrain.api.training import OptimizerSpec
from edgetrain.bench.paper import compare
from edgetrain.bench.paper.arithmetic import mean_std, t975
from edgetrain.bench.paper.config import (
    BenchConfig,
    BoardConfig,
    DatasetRef,
    PredictedProfiling,
    ProfilingCost,
    WorkloadConfig,
)
from edgetrain.bench.paper.estimates import estimate_key
from edgetrain.bench.paper.evaluate import truth_lut
from edgetrain.bench.paper.plot import write_plot
from edgetrain.bench.paper.profiles import full_profile, predicted_profile
from edgetrain.bench.paper.render import render_markdown
from edgetrain.bench.paper.results import EstimateRecord, PaperBenchResult

EXACT = ProfilingCost(time_noise=0.0, power_noise=0.0)
BATCHES = [4, 16, 64]
# Proxy and target agree on the shape of N(b) (small batches are sample-efficient).
SAMPLES = {"p": [10_000.0, 12_000.0, 20_000.0], "t": [11_000.0, 12_500.0, 24_000.0]}


def _config(profiling: ProfilingCost = EXACT, seeds: tuple[int, ...] = (0, 1)) -> BenchConfig:
    return BenchConfig(
        scale="test",
        workloads=[
            WorkloadConfig(
                label="fake",
                model="resnet8-w025",
                twin_model="resnet18",
                twin_input_shape=(3, 32, 32),
                twin_num_classes=10,
                datasets=[
                    DatasetRef(name="p", target_accuracy=0.9),
                    DatasetRef(name="t", target_accuracy=0.9),
                ],
                proxy="p",
                targets=["t"],
                batch_sizes=BATCHES,
                sample_budget=40_000,
            )
        ],
        boards=[BoardConfig(board="jetson-nano", power_limits_w=[4.5, None])],
        seeds=list(seeds),
        profiling=profiling,
        predicted=PredictedProfiling(points=8, epochs=30),
    )


def _estimates(config: BenchConfig) -> dict[str, EstimateRecord]:
    w = config.workloads[0]
    return {
        estimate_key(w, ref, seed): EstimateRecord(
            model=w.model,
            dataset=ref.name,
            dataset_limit=None,
            target_accuracy=ref.target_accuracy,
            batch_sizes=BATCHES,
            optimizer=OptimizerSpec(),
            sample_budget=w.sample_budget,
            eval_interval_samples=w.eval_interval_samples,
            eval_samples=None,
            seed=seed,
            samples_to_accuracy=list(SAMPLES[ref.name]),
            wall_s=0.0,
        )
        for ref in w.datasets
        for seed in config.seeds
    }


@pytest.fixture(scope="module")
def exact_result() -> PaperBenchResult:
    config = _config()
    estimates = _estimates(config)
    return compare(config, estimates).model_copy(update={"command": "test", "date": "now"})


def test_t_interval_matches_the_student_quantile() -> None:
    stat = mean_std([1.0, 2.0, 3.0])
    assert stat.ci95 == pytest.approx((2 - 4.303 / math.sqrt(3), 2 + 4.303 / math.sqrt(3)))
    assert mean_std([5.0]).ci95 is None
    assert t975(40) == 1.96


def test_full_profile_measures_every_cell_once() -> None:
    truth = truth_lut("jetson-nano", "resnet18", (3, 32, 32), 10, BATCHES)
    profile = full_profile(truth, np.random.default_rng(0), EXACT)
    cells = {(p.batch_size, p.gpu_freq_hz) for p in profile.points}
    assert profile.measured == len(cells) == truth.time_per_sample_s.size
    assert profile.device_s > 0


def test_predicted_profile_keeps_measured_cells_and_predicts_the_rest() -> None:
    truth = truth_lut("jetson-nano", "resnet18", (3, 32, 32), 10, BATCHES)
    spec = PredictedProfiling(points=8, epochs=30)
    profile, fit = predicted_profile(truth, "jetson-nano", np.random.default_rng(0), EXACT, spec, 0)
    assert profile.measured == fit.measured_points == 8
    assert len(profile.points) == fit.grid_points == truth.time_per_sample_s.size
    assert all(p.cpu_freq_hz is None and p.emc_freq_hz is None for p in profile.points)
    # With exact measurements the 8 measured cells are the truth; the others are MLP output.
    freqs = truth.gpu_freqs_hz.tolist()
    exact = [
        p
        for p in profile.points
        if p.time_per_sample_s
        == truth.time_per_sample_s[BATCHES.index(p.batch_size), freqs.index(p.gpu_freq_hz)]
    ]
    assert len(exact) >= 8
    assert 0 < fit.time_mape_pct < 100 and 0 < fit.peak_power_mape_pct < 100


def test_exact_full_grid_plans_the_oracle_when_proxy_is_target(
    exact_result: PaperBenchResult,
) -> None:
    same = [c for c in exact_result.cases if c.proxy == c.target]
    assert same
    for c in same:
        assert c.full is not None and c.oracle is not None
        assert (c.full.batch_size, c.full.gpu_freq_hz) == (
            c.oracle.batch_size,
            c.oracle.gpu_freq_hz,
        )
        # The frontier profile is a subset of the grid: never better than the full grid's plan.
        assert c.edgetrain is not None and c.edgetrain.tta_s is not None
        assert c.full.tta_s is not None
        assert c.edgetrain.tta_s >= c.full.tta_s - 1e-9
        # Overheads: the full grid costs more device time than the frontier and the prediction.
        assert c.full_profiling_s > c.profiling_s and c.full_profiling_s > c.predicted_profiling_s
        assert c.predicted_points == 8


def test_summary_and_headline_report_predicted_against_full(
    exact_result: PaperBenchResult,
) -> None:
    rows = exact_result.summaries
    assert [(s.target, s.power_limit_w) for s in rows] == [("t", 4.5), ("t", None)]
    for s in rows:
        assert s.full_over_oracle.mean == pytest.approx(1.0)
        assert s.predicted_over_full.n == 2 and s.predicted_over_full.mean is not None
        assert s.predicted_over_limit_1w <= s.predicted_over_limit <= 2
    h = exact_result.headline
    assert h is not None
    assert h.cells == 2 and h.limited_cases == 2  # one limited cell × two seeds
    assert h.full_over_oracle.mean == pytest.approx(1.0)
    assert h.edgetrain_over_oracle.ci95 is not None  # two seeds: an interval
    assert set(h.overhead_pct) == {"frontier", "full", "predicted"}
    full, frontier = h.overhead_pct["full"].mean, h.overhead_pct["frontier"].mean
    assert full is not None and frontier is not None and full > frontier
    assert [r.workload for r in h.low_limit] == [None, "fake"]
    assert h.time_mape_pct.n == 2  # one predicted profile per (board, seed)
    assert h.penalty_pct.mean is not None
    assert h.goals["TTA penalty ≤ 1 %"] == (h.penalty_pct.mean <= 1.0)


def test_render_json_and_plot_carry_the_new_columns(
    exact_result: PaperBenchResult, tmp_path: Path
) -> None:
    text = render_markdown(exact_result.summary())
    assert "predicted/oracle" in text and "full/oracle" in text and "## Headline" in text
    assert "| fake | t | jetson-nano | 4.5 W |" in text
    assert "peak-power MAPE ≤ 4 %" in text and "## Predicted profiles" in text
    data = json.loads(exact_result.summary().model_dump_json())
    assert "cases" not in data
    assert data["seeds"] == [0, 1] and data["simulated"] is True
    assert {e["samples_to_accuracy"][0] for e in data["estimates"]} == {10_000.0, 11_000.0}
    assert {"headline", "predictions", "summaries", "config"} <= set(data)
    png = tmp_path / "fig.png"
    write_plot(exact_result, png)
    assert png.read_bytes()[:4] == b"\x89PNG"
