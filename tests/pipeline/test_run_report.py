"""`edgetrain run`: the whole pipeline on a Nano twin, its report, and the cache on a rerun."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from edgetrain.api.errors import InputError
from edgetrain.api.job import load_job
from edgetrain.pipeline.report import history_summary
from edgetrain.pipeline.run import RunOutcome
from tests.helpers import run_edgetrain

JOB = """
apiVersion: edgetrain.io/v1alpha1
kind: PowerAwareTrainingJob
metadata: {name: tiny}
spec:
  model: {architecture: resnet8-w025}
  dataset: {name: digits}
  proxyDataset: {name: digits, limit: 800}
  targetAccuracy: 0.5
  powerLimitWatts: 2.45
  batchSizes: [16, 64]
  gpuFrequenciesHz: [76800000, 230400000, 460800000]
  optimizer: {learningRate: 4.0e-3, referenceBatchSize: 64}
  placement: {device: "sim:jetson-nano"}
  budget: {estimateSamples: 4000, trainSamples: 4000, evalIntervalSamples: 256,
           evalSamples: 300, profileMinibatches: 2, seeds: [0]}
"""


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the runs of JOB's variants: the predicted run reuses the estimate."""
    return tmp_path_factory.mktemp("cache")


def _run(job: Path, tmp: Path, report: Path, *extra: str,
         cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EDGETRAIN_CACHE_DIR": str(cache or tmp / "cache")}
    return run_edgetrain("run", str(job), "--report", str(report), "--workdir", str(tmp / "work"),
                         "--json-progress", "--profile-window", "0.3", *extra, env=env)


def test_run_writes_a_report_and_reuses_the_cache(tmp_path: Path, shared_cache: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    first = _run(job, tmp_path, tmp_path / "r1", cache=shared_cache)
    assert first.returncode == 0, first.stderr
    outcome = RunOutcome.model_validate_json((tmp_path / "r1" / "report.json").read_text())
    assert outcome.simulated and outcome.device_model == "jetson-nano"
    assert outcome.plan.within_limit and outcome.plan.power_w <= 2.45
    assert outcome.training.reached_target
    import torch

    expected_device = "cuda:0" if torch.cuda.is_available() else "cpu"  # spec default: auto
    assert outcome.device == outcome.training.device == expected_device
    assert outcome.precision == "fp32" and outcome.efficiency.device == outcome.device
    assert outcome.profile_metadata.device == outcome.device
    assert outcome.training.usage.simulated and (outcome.training.usage.energy_j or 0) > 0
    assert not outcome.profile_phase.cached
    assert outcome.profile_metadata.measured_points <= outcome.profile_metadata.grid_points
    assert {"B1", "B2"} <= set(outcome.plan.baselines)
    for name in (
        "time-heatmap",
        "power-heatmap",
        "choice",
        "efficiency",
        "training",
        "power-trace",
    ):
        png = tmp_path / "r1" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = [json.loads(line) for line in first.stdout.splitlines()]
    assert {"efficiency", "plan", "result"} <= {e["event"] for e in events}
    # The power trace is on the device's clock: it ends where training's device time ends.
    trace_t = [t for t, _ in outcome.power_trace]
    assert trace_t == sorted(trace_t) and len(trace_t) > 1
    assert trace_t[-1] == pytest.approx(outcome.training.usage.device_time_s, rel=1e-6)
    assert all(p > 0 for _, p in outcome.power_trace)

    # The first run had nothing to learn from: it planned from the proxy's r, tilted per
    # doubling of b by the population prior (the committed benches' (proxy, target) pairs).
    first_history = outcome.history
    assert first_history is not None and first_history.observations_total == 0
    assert first_history.sources.tilt_trusted and first_history.gate is not None
    tilt = first_history.sources.tilt_prior_mean
    sizes, prior_r = first_history.batch_sizes, first_history.prior_r
    tilted = [math.log(p / prior_r[0]) + tilt * math.log2(b / sizes[0])
              for b, p in zip(sizes, prior_r, strict=True)]
    planned = [math.log(p / first_history.planned_r[0]) for p in first_history.planned_r]
    assert planned == pytest.approx(tilted, abs=1e-6)
    assert outcome.observation and Path(outcome.observation).is_file()

    second = _run(job, tmp_path, tmp_path / "r2", cache=shared_cache)
    assert second.returncode == 0, second.stderr
    again = RunOutcome.model_validate_json((tmp_path / "r2" / "report.json").read_text())
    assert again.efficiency_phase.cached and again.profile_phase.cached
    # The second run learned from the first's observation (recurring jobs, issue 30).
    history = again.history
    assert history is not None and history.observations_total == 1
    seen = history.observations[0]
    # N where the curve crossed the target, between the evaluation before it and its own.
    assert seen.batch_size == outcome.plan.batch_size
    assert seen.samples == outcome.training.samples_to_target
    assert seen.samples <= outcome.training.samples
    # One size's observation teaches how hard the target is, not which size is best: only the
    # gradient noise scales, measured on the proxy by the estimate and on the target by the
    # training, may reshape r; the plan is the posterior mean's and the gate (α = 1 %) exploited.
    src = history.sources
    assert src.noise_scale_proxy is not None and src.noise_scale_target is not None
    assert src.noise_shape_used
    assert history.planned_r == pytest.approx(history.posterior_r)
    assert history.gate is not None and not history.gate.explored
    assert history.sources.observations == 1 and history.sources.proxy_seeds == 1
    i = history.batch_sizes.index(again.plan.batch_size)
    assert again.plan.r == pytest.approx(history.planned_r[i])
    assert (tmp_path / "r2" / "history.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The summary `edgetrain run` prints: the chosen r, where it came from, what the gate did.
    rows = dict(history_summary(history))
    assert rows["planned r"].startswith(f"{history.batch_sizes[0]}: ")
    assert rows["r from"] == "proxy (1 seed(s)), 1 observation(s)"
    assert rows["tilt prior"].endswith(f"({src.tilt_pairs} pairs)")
    assert rows["noise scale"].startswith("B_noise proxy ")
    assert rows["exploration gate"].startswith(
        f"exploited (incumbent b={history.gate.incumbent_batch_size};")

    # Opted out, a job plans from the proxy's r as before: the first run's plan, from the cache.
    job.write_text(JOB + "  strategy: {learnFromHistory: false}\n")
    third = _run(job, tmp_path, tmp_path / "r3", cache=shared_cache)
    assert third.returncode == 0, third.stderr
    opted_out = RunOutcome.model_validate_json((tmp_path / "r3" / "report.json").read_text())
    assert opted_out.history is None and opted_out.profile_phase.cached
    assert (opted_out.plan.batch_size, opted_out.plan.gpu_freq_hz) == (
        outcome.plan.batch_size,
        outcome.plan.gpu_freq_hz,
    )


def test_run_with_a_missing_device_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    proc = _run(job, tmp_path, tmp_path / "r", "--device", "cuda:7", "--precision", "bf16")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--device cuda:7" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


def test_demo_job_loads() -> None:
    spec = load_job(Path(__file__).parents[2] / "examples" / "demo-nano.yaml")
    assert spec.placement.device == "sim:jetson-nano" and spec.power_limit_watts == 4


def test_predicted_demo_job_passes_the_checks() -> None:
    from edgetrain.pipeline.validate import job_problems

    spec = load_job(Path(__file__).parents[2] / "examples" / "demo-orin-predicted.yaml")
    assert spec.strategy.profiling == "predicted" and spec.strategy.predict_points == 20
    assert job_problems(spec) == []


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("kind: Deployment\n", "kind is 'Deployment'"),
        ("- a\n", "expected a mapping"),
        (
            "kind: PowerAwareTrainingJob\nspec: {model: {architecture: m}, dataset: {name: d},"
            " proxyDataset: {name: p}, targetAccuracy: 1.5}\n",
            "field 'spec.targetAccuracy'",
        ),
        (
            "model: {architecture: m}\ndataset: {name: d}\nproxyDataset: {name: p}\n"
            "targetAccuracy: 0.9\nbatchSizes: [8, 8]\n",
            "batch sizes must be unique",
        ),
        (
            "model: {architecture: m}\ndataset: {name: d}\nproxyDataset: {name: p}\n"
            "targetAccuracy: 0.9\npowerLimitWatts: -1\n",
            "field 'powerLimitWatts'",
        ),
    ],
)
def test_bad_job_files_name_the_field(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_job(path)
    assert fragment in str(info.value)


def test_run_loads_the_target_set_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Profiling and training share one loaded target set (the proxy is estimate's own)."""
    from edgetrain.pipeline.run import run_job
    from edgetrain.workloads import datasets

    loads: list[tuple[str, int | None]] = []
    real = datasets.load_images

    def counting(name: str, limit: int | None = None) -> datasets.ImageDataset:
        loads.append((name, limit))
        return real(name, limit)

    monkeypatch.setattr(datasets, "load_images", counting)
    monkeypatch.setenv("EDGETRAIN_CACHE_DIR", str(tmp_path / "cache"))
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    outcome = run_job(load_job(job), tmp_path / "work", profile_window_s=0.3)
    assert outcome.training.samples > 0
    assert loads.count(("digits", None)) == 1, loads  # the target set (no limit in JOB)
    assert ("digits", 800) in loads  # the proxy, loaded by the estimate


def test_run_with_predicted_profiling_plans_a_full_power_mode(
    tmp_path: Path, shared_cache: Path
) -> None:
    """`profiling: predicted`: k measured modes, the rest predicted, the plan's mode applied."""
    job = tmp_path / "job.yaml"
    job.write_text(
        JOB.replace("  gpuFrequenciesHz: [76800000, 230400000, 460800000]\n", "")
        .replace("powerLimitWatts: 2.45", "powerLimitWatts: 3.5")
        .replace("  placement:",
                 "  strategy: {profiling: predicted, predictPoints: 8}\n  placement:")
    )
    proc = _run(job, tmp_path, tmp_path / "r", cache=shared_cache)
    assert proc.returncode == 0, proc.stderr
    outcome = RunOutcome.model_validate_json((tmp_path / "r" / "report.json").read_text())
    assert not outcome.profile_phase.cached  # the strategy is part of the profile's key
    meta = outcome.profile_metadata
    assert meta.strategy == "predicted" and meta.measured_points == 8
    assert meta.grid_points == len(outcome.profile) > 8 * 10  # every (b, mode), mostly predicted
    plan = outcome.plan
    assert None not in (plan.cpu_cores, plan.cpu_freq_hz, plan.emc_freq_hz)
    assert plan.within_limit and plan.power_w <= 3.5
    # Trained in the planned mode: per minibatch, the twin's model at that (b, f, CPU, EMC),
    # whose power differs from the board's default mode (time may not: a GPU-bound model).
    from edgetrain.device.sim import PowerMode, ground_truth
    from edgetrain.workloads import workload_cost
    from edgetrain.workloads.training import load_task

    task = load_task("digits", None)
    cost = workload_cost("resnet8-w025", tuple(task.x_train.shape[1:]), task.num_classes)
    mode = PowerMode(cpu_cores=plan.cpu_cores, cpu_freq_hz=plan.cpu_freq_hz,
                     emc_freq_hz=plan.emc_freq_hz)
    planned = ground_truth("jetson-nano", cost, plan.batch_size, plan.gpu_freq_hz, mode)
    default = ground_truth("jetson-nano", cost, plan.batch_size, plan.gpu_freq_hz)
    usage = outcome.training.usage
    steps = -(-outcome.training.samples // plan.batch_size)
    assert usage.device_time_s / steps == pytest.approx(planned.time_per_batch_s, rel=0.02)
    mean_w = (usage.energy_j or 0.0) / usage.device_time_s
    assert planned.mean_power_w != default.mean_power_w
    assert abs(mean_w - planned.mean_power_w) < abs(mean_w - default.mean_power_w)
    assert (tmp_path / "r" / "modes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "r" / "time-heatmap.png").exists()
