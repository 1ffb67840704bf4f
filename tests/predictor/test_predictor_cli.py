"""`edgetrain profile --strategy predicted` on a live twin, `bench predictor`, `train-reference`.

Every figure is simulated (device twin); sizes are cut down so the file runs in well under a
minute.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgetrain.api import read_profile
from edgetrain.api.profile import read_profile_metadata
from edgetrain.device.sim import DeviceTwin, read_state
from edgetrain.planner import Lut
from edgetrain.predictor.mlp import PredictionReport
from edgetrain.predictor.reference import load_reference
from edgetrain.workloads import workload_cost
from tests.helpers import FAST_PROFILE_ARGS, run_edgetrain


def test_predicted_profile_on_a_twin(nano: DeviceTwin, tmp_path: Path) -> None:
    before = read_state(nano.root)
    assert before is not None
    out = tmp_path / "predicted.csv"
    proc = run_edgetrain(
        "profile",
        "--model",
        "resnet8-w025",
        "--dataset",
        "digits",
        "--batch-sizes",
        "8,64",
        "--gpu-freqs",
        "230.4MHz,921.6MHz",
        "--strategy",
        "predicted",
        "--points",
        "5",
        "--epochs",
        "20",
        "--sysfs-root",
        str(nano.root),
        "-o",
        str(out),
        "--json-progress",
        *FAST_PROFILE_ARGS,
    )
    assert proc.returncode == 0, proc.stderr
    points = read_profile(out)
    meta = read_profile_metadata(out)
    # 2 batch sizes × (2 GPU × 15 CPU clocks × 4 core counts × 7 EMC clocks) modes.
    assert meta is not None and meta.strategy == "predicted" and meta.simulated
    assert meta.measured_points == 5 and meta.grid_points == len(points) == 2 * 2 * 15 * 4 * 7
    lut = Lut.from_points(points)
    assert lut.has_full_modes and lut.measured.all()
    report = PredictionReport.model_validate_json(
        (tmp_path / "predicted.predictor.json").read_text()
    )
    assert report.profiled_points == 5
    assert report.reference == load_reference("jetson-nano", cost_of=workload_cost).name
    assert report.power_margin["peak_power_w"] >= 0.0
    # The measured points were taken in the mode they name (the twin reports its mode).
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    measured = [e for e in events if e["event"] == "progress" and "cpu_cores" in e]
    assert len(measured) == 5
    by_key = {(p.batch_size, p.mode): p for p in points}
    for e in measured:
        key = (
            e["batch_size"],
            (e["gpu_freq_hz"], e["cpu_freq_hz"], e["cpu_cores"], e["emc_freq_hz"]),
        )
        assert by_key[key].peak_power_w == pytest.approx(e["peak_power_w"])
    # CPU cores, CPU and EMC clocks are restored afterwards.
    nano.tick()
    after = read_state(nano.root)
    assert after is not None
    assert (after.cpu_cores, after.cpu_freq_hz, after.emc_freq_hz) == (
        before.cpu_cores,
        before.cpu_freq_hz,
        before.emc_freq_hz,
    )


def test_bench_predictor_smallrun_edgetrain(tmp_path: Path) -> None:
    md = tmp_path / "bench.md"
    proc = run_edgetrain(
        "bench",
        "predictor",
        "--boards",
        "jetson-orin-nano",
        "--workloads",
        "resnet8",
        "--cross-device",
        "",
        "--batch-sizes",
        "16,64",
        "--k",
        "12",
        "--repeats",
        "1",
        "--limits",
        "5",
        "--epochs",
        "5",
        "--markdown",
        str(md),
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines() if '"strategies"' in line]
    assert len(results) == 1
    case = results[0]
    assert case["simulated"] and case["board"] == "jetson-orin-nano"
    strategies = {s["strategy"]: s for s in case["strategies"]}
    assert {"PT", "NN scratch", "observed-k Pareto", "nvpmodel stock", "MAXN"} <= set(strategies)
    # MAXN ignores the limit: it is over it at every limit below its own power.
    assert strategies["MAXN"]["over_limit_pct"] > 0
    assert strategies["PT"]["profiled_points"] == 12
    assert case["full_grid_h"] > strategies["PT"]["profiling_h"]
    assert "| jetson-orin-nano | resnet8 | jetson-orin-nano | PT |" in md.read_text()


def test_train_reference_writes_a_loadable_file(tmp_path: Path) -> None:
    proc = run_edgetrain(
        "train-reference",
        "--board",
        "jetson-orin-nano",
        "--points",
        "300",
        "--epochs",
        "2",
        "--output-dir",
        str(tmp_path),
        "--json-progress",
    )
    assert proc.returncode == 0, proc.stderr
    ref = load_reference("jetson-orin-nano", tmp_path, cost_of=workload_cost)
    assert ref.meta.points == 300 and ref.meta.config.epochs == 2
    assert (tmp_path / "jetson-orin-nano.json").is_file()
    bad = run_edgetrain("train-reference", "--board", "jetson-nope", "--output-dir", str(tmp_path))
    assert bad.returncode == 2 and "jetson-nope" in bad.stderr
