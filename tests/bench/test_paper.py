"""`bench paper`: the time-to-accuracy arithmetic on hand-made grids, and one tiny real run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from edgetrain.api.plan import PowerMetric
from edgetrain.api.profile import ProfilePoint
from edgetrain.api.training import OptimizerSpec
from edgetrain.bench.paper.arithmetic import (
    baseline_batches,
    mean_std,
    noisy_measure,
    point_device_time_s,
    profiling_device_time_s,
    ratio,
    time_to_accuracy_s,
)
from edgetrain.bench.paper.config import (
    BenchConfig,
    BoardConfig,
    DatasetRef,
    ProfilingCost,
    WorkloadConfig,
    scaled_limit_w,
    small_config,
)
from edgetrain.bench.paper.estimates import estimate_key
from edgetrain.bench.paper.evaluate import FrontierProfile, evaluate_case, frontier_profile
from edgetrain.bench.paper.render import fmt_stat
from edgetrain.bench.paper.results import EstimateRecord
from edgetrain.cli import app
from edgetrain.planner import Lut

MHZ = 1_000_000
PEAK = PowerMetric.peak
EXACT = ProfilingCost(time_noise=0.0, power_noise=0.0)

# Two batch sizes, three clocks. Under 4.2 W, b=64 only fits 100 MHz while b=8 reaches 300 MHz.
TIME_S = np.array([[0.030, 0.016, 0.012], [0.020, 0.011, 0.008]])
PEAK_W = np.array([[2.0, 3.0, 4.0], [3.0, 4.5, 6.0]])
TRUTH = Lut.from_grid([8, 64], [100 * MHZ, 200 * MHZ, 300 * MHZ], TIME_S, PEAK_W, PEAK_W * 0.8)


def record(dataset: str, samples: list[float | None]) -> EstimateRecord:
    return EstimateRecord(
        model="m",
        dataset=dataset,
        dataset_limit=None,
        target_accuracy=0.5,
        batch_sizes=[8, 64],
        optimizer=OptimizerSpec(),
        sample_budget=10_000,
        eval_interval_samples=100,
        eval_samples=None,
        seed=0,
        samples_to_accuracy=samples,
        wall_s=0.0,
    )


def exact_profile(board: str = "jetson-tx2-nx", limit: float | None = 4.2) -> FrontierProfile:
    return frontier_profile(TRUTH, board, limit, np.random.default_rng(0), EXACT, PEAK)


def test_mean_std_counts_misses_and_uses_sample_std() -> None:
    stat = mean_std([1.0, 3.0, None])
    assert stat.mean == 2.0
    assert stat.std == pytest.approx(math.sqrt(2.0))
    assert (stat.n, stat.missing) == (2, 1)
    assert mean_std([5.0]).std == 0.0
    empty = mean_std([None, None])
    assert empty.mean is None and empty.missing == 2
    assert fmt_stat(empty) == "miss"
    assert fmt_stat(stat, 2) == "2.00 ± 1.41 (1 miss)"


def test_ratio_and_tta_propagate_misses() -> None:
    assert ratio(6.0, 3.0) == 2.0
    assert ratio(None, 3.0) is None
    assert ratio(1.0, 0.0) is None
    assert time_to_accuracy_s(0.01, 2000) == pytest.approx(20.0)
    assert time_to_accuracy_s(0.01, None) is None


def test_point_device_time_has_warmup_wait_and_window() -> None:
    cost = ProfilingCost(minibatches=40, stabilise_s=2.5, min_window_s=1.0)
    # Slow batches: the 39 timed minibatches exceed the 1 s window.
    assert point_device_time_s(0.1, cost) == pytest.approx(0.1 + 2.5 + 3.9)
    # Fast batches: the window's minimum length binds.
    assert point_device_time_s(0.01, cost) == pytest.approx(0.01 + 2.5 + 1.0)
    points = [
        ProfilePoint(
            batch_size=10,
            gpu_freq_hz=MHZ,
            time_per_sample_s=0.01,
            peak_power_w=2.0,
            mean_power_w=1.0,
        )
    ] * 2
    assert profiling_device_time_s(points, cost) == pytest.approx(2 * (0.1 + 2.5 + 3.9))


def test_baseline_batches_largest_and_fewest_proxy_samples() -> None:
    assert baseline_batches([8, 16, 64], [900.0, 700.0, 1200.0]) == (64, 16)
    # Ties go to the larger batch; misses are never B2.
    assert baseline_batches([8, 16, 64], [700.0, 700.0, None]) == (64, 16)
    assert baseline_batches([8, 64], [None, None]) == (64, None)


def test_scaled_limit_keeps_the_place_in_the_power_range() -> None:
    # One third of the way up (2 → 9.5 W) lands one third up 3 → 11 W: 5.67, rounded to 5.5.
    assert scaled_limit_w(4.5, (2.0, 9.5), (3.0, 11.0)) == 5.5
    assert scaled_limit_w(7.0, (2.0, 9.5), (3.0, 11.0)) == 8.5
    assert scaled_limit_w(4.5, (2.0, 9.5), (2.0, 9.5)) == 4.5


def test_frontier_profile_counts_points_and_finds_baseline_column() -> None:
    profile = exact_profile()
    # b=64: 100 MHz fits, 200 MHz exceeds and stops; b=8 from 100 MHz up to 300 MHz.
    assert [(p.batch_size, p.gpu_freq_hz // MHZ) for p in profile.points] == [
        (64, 100),
        (64, 200),
        (8, 100),
        (8, 200),
        (8, 300),
    ]
    assert (profile.baseline_freq_hz, profile.baseline_freq_source) == (
        100 * MHZ,
        "baseline_column",
    )
    assert profile.device_s == pytest.approx(profiling_device_time_s(profile.points, EXACT))


def test_frontier_profile_uses_the_papers_nano_frequencies() -> None:
    freqs = [307_200_000, 614_400_000, 921_600_000]
    truth = Lut.from_grid([8, 64], freqs, TIME_S, PEAK_W, PEAK_W * 0.8)
    for limit, freq in ((4.5, 307_200_000), (7.0, 614_400_000), (None, 921_600_000)):
        profile = frontier_profile(
            truth, "jetson-nano", limit, np.random.default_rng(0), EXACT, PEAK
        )
        assert (profile.baseline_freq_hz, profile.baseline_freq_source) == (freq, "paper")


def test_case_arithmetic_on_a_hand_made_grid() -> None:
    proxy = record("proxy", [1000.0, 1500.0])  # r = (0.667, 1): small batches are efficient
    target = record("target", [1000.0, 2000.0])
    got = evaluate_case(TRUTH, exact_profile(), proxy, target, 4.2, PEAK)
    et, b1, b2, oracle = got["edgetrain"], got["b1"], got["b2"], got["oracle"]
    assert et is not None and b1 is not None and b2 is not None and oracle is not None
    # edgetrain: 8@300 (0.012 × 0.667) beats 64@100 (0.020 × 1); true TTA 0.012 × 1000.
    assert (et.batch_size, et.gpu_freq_hz) == (8, 300 * MHZ)
    assert et.tta_s == pytest.approx(12.0)
    assert et.energy_j == pytest.approx(0.8 * 4.0 * 12.0)
    assert et.within_limit
    # B1: the largest batch at the safe 100 MHz; B2: proxy's fewest samples (b=8) there.
    assert (b1.batch_size, b1.gpu_freq_hz, b1.tta_s) == (64, 100 * MHZ, pytest.approx(40.0))
    assert (b2.batch_size, b2.gpu_freq_hz, b2.tta_s) == (8, 100 * MHZ, pytest.approx(30.0))
    assert (oracle.batch_size, oracle.gpu_freq_hz, oracle.tta_s) == (8, 300 * MHZ, 12.0)
    assert ratio(b1.tta_s, et.tta_s) == pytest.approx(40 / 12)


def test_a_misleading_proxy_is_charged_the_targets_true_time() -> None:
    proxy = record("proxy", [3000.0, 1000.0])  # says b=64 needs a third of b=8's samples
    target = record("target", [1000.0, 2000.0])
    got = evaluate_case(TRUTH, exact_profile(), proxy, target, 4.2, PEAK)
    et, oracle = got["edgetrain"], got["oracle"]
    assert et is not None and oracle is not None
    assert (et.batch_size, et.gpu_freq_hz) == (64, 100 * MHZ)
    assert ratio(et.tta_s, oracle.tta_s) == pytest.approx(40 / 12)


def test_target_misses_are_excluded_from_the_oracle_and_charged_to_edgetrain() -> None:
    proxy = record("proxy", [1000.0, 1500.0])
    target = record("target", [None, 2000.0])  # b=8 never reaches the target on the target set
    got = evaluate_case(TRUTH, exact_profile(), proxy, target, 4.2, PEAK)
    et, oracle = got["edgetrain"], got["oracle"]
    assert et is not None and oracle is not None
    assert et.batch_size == 8 and et.tta_s is None and et.energy_j is None
    assert (oracle.batch_size, oracle.tta_s) == (64, pytest.approx(40.0))


def test_no_limit_uses_the_top_clock() -> None:
    got = evaluate_case(
        TRUTH,
        exact_profile(limit=None),
        record("p", [1000.0, 1000.0]),
        record("t", [1000.0, 1000.0]),
        None,
        PEAK,
    )
    et, b1 = got["edgetrain"], got["b1"]
    assert et is not None and b1 is not None
    assert (et.batch_size, et.gpu_freq_hz) == (64, 300 * MHZ) == (b1.batch_size, b1.gpu_freq_hz)


def test_noise_is_seeded_and_zero_noise_is_exact() -> None:
    def run(seed: int, cost: ProfilingCost) -> list[ProfilePoint]:
        points, measure = noisy_measure(TRUTH, np.random.default_rng(seed), cost)
        measure(8, 100 * MHZ)
        measure(64, 300 * MHZ)
        return points

    noisy = ProfilingCost(time_noise=0.05, power_noise=0.05)
    assert run(1, noisy) == run(1, noisy) != run(2, noisy)
    exact = run(1, EXACT)
    assert exact[1].time_per_sample_s == 0.008 and exact[1].peak_power_w == 6.0
    assert all(p.mean_power_w <= p.peak_power_w for p in run(3, ProfilingCost(power_noise=0.5)))


def test_estimate_key_changes_with_what_changes_the_answer() -> None:
    config = small_config()
    w = config.workloads[0]
    d = w.datasets[0]
    assert estimate_key(w, d, 0) == estimate_key(w, d, 0)
    assert estimate_key(w, d, 0) != estimate_key(w, d, 1)
    assert estimate_key(w, d, 0) != estimate_key(w.model_copy(update={"sample_budget": 1}), d, 0)
    other = d.model_copy(update={"target_accuracy": 0.99})
    assert estimate_key(w, d, 0) != estimate_key(w, other, 0)


def test_configs_are_valid_and_limits_bind_per_board() -> None:
    config = small_config()
    limits = {b.board: b.power_limits_w for b in config.boards}
    assert limits["jetson-nano"] == [4.5, 7.0, None]
    for board, values in limits.items():
        assert values[-1] is None and values[0] is not None and values[1] is not None
        assert values[0] < values[1], board


def test_bench_paper_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGETRAIN_CACHE_DIR", str(tmp_path / "cache"))
    sets = [
        DatasetRef(name="digits", limit=400, target_accuracy=0.15),
        DatasetRef(name="mnist", limit=400, target_accuracy=0.15),
    ]
    config = BenchConfig(
        scale="test",
        workloads=[
            WorkloadConfig(
                label="tiny",
                model="resnet8-w025",
                datasets=sets,
                proxy="digits",
                targets=["mnist"],
                batch_sizes=[16, 32],
                optimizer=OptimizerSpec(learning_rate=1e-2, reference_batch_size=32),
                sample_budget=192,
                eval_interval_samples=64,
                eval_samples=80,
            )
        ],
        boards=[BoardConfig(board="jetson-nano", power_limits_w=[4.5, None])],
        seeds=[0],
    )
    config_path, out = tmp_path / "config.json", tmp_path / "paper.md"
    config_path.write_text(config.model_dump_json())
    args = ["bench", "paper", "--config", str(config_path), "--output", str(out), "--json"]
    args += ["--jobs", "1"]  # worker processes would spend more time importing than training

    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    result = json.loads(first.stdout.strip().splitlines()[-1])
    assert result["estimates_run"] == 2 and result["estimates_cached"] == 0
    assert len(result["summaries"]) == 2  # one target × two limits × one board
    assert len(result["sensitivity"]) == 2 * 2 * 2  # proxies × targets × limits
    assert all(c["simulated"] for c in result["cases"])
    table = out.read_text()
    assert "simulated" in table and "| tiny | mnist | jetson-nano | 4.5 W |" in table

    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0, second.output
    again = json.loads(second.stdout.strip().splitlines()[-1])
    assert again["estimates_run"] == 0 and again["estimates_cached"] == 2
    assert again["summaries"] == result["summaries"]
