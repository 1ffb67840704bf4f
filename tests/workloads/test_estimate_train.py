"""Proxy estimation and resumable training on real PyTorch and real (offline) data."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgetrain.api import read_efficiency
from edgetrain.api.efficiency import EfficiencyPart, median_samples
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.api.training import LrScaling, OptimizerSpec
from edgetrain.operator.estimate_parts import parts_verdict
from edgetrain.workloads.training import load_task, sample_indices
from tests.helpers import run_edgetrain

SMALL = [
    "--model",
    "resnet8-w025",
    "--dataset",
    "digits",
    "--learning-rate",
    "4e-3",
    "--reference-batch-size",
    "64",
    "--eval-samples",
    "359",
]


def test_learning_rate_scaling_rules() -> None:
    spec = OptimizerSpec(learning_rate=5e-4, reference_batch_size=128)
    assert spec.learning_rate_for(32) == pytest.approx(2.5e-4)  # sqrt(1/4)
    linear = spec.model_copy(update={"scaling": LrScaling.linear})
    assert linear.learning_rate_for(32) == pytest.approx(1.25e-4)
    assert OptimizerSpec.model_validate({"learningRate": 1e-3}).learning_rate == 1e-3


def test_median_over_seeds_treats_misses_as_infinite() -> None:
    assert median_samples([100, 300, 200]) == 200
    assert median_samples([100, None, 200]) == 200
    assert median_samples([100, None, None]) is None


def test_sample_stream_is_a_permutation_per_epoch() -> None:
    first = sample_indices(0, 10, 10, seed=1).tolist()
    assert sorted(first) == list(range(10))
    assert sample_indices(5, 10, 10, seed=1)[:5].tolist() == first[5:]
    assert sample_indices(0, 10, 10, seed=2).tolist() != first


def test_text_task_windows_predict_the_next_character() -> None:
    task = load_task("tom-sawyer", limit=100)
    assert task.kind == "text" and task.x_train.shape[1] == 64
    assert (task.x_train[0, 1:] == task.y_train[0, :-1]).all()


ESTIMATE = [
    "estimate",
    *SMALL,
    "--batch-sizes",
    "8,64",
    "--target-accuracy",
    "0.6",
    "--sample-budget",
    "4000",
    "--eval-interval",
    "128",
    "--json-progress",
]


def test_estimate_writes_a_non_flat_efficiency_vector(tmp_path: Path) -> None:
    """One process trains every batch size; as a pod of the operator's Indexed Job, a process
    trains one run (here run 1, b=64) and writes its part: the same samples, and merged with
    the other run's part, the same vector."""
    out, part_file = tmp_path / "eff.json", tmp_path / "part-1.json"
    # The run of the Indexed Job, side by side with the single estimate.
    run = subprocess.Popen(
        [sys.executable, "-m", "edgetrain", *ESTIMATE, "--run-index", "1",
         "--part-of", "key/uid", "-o", str(part_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    proc = run_edgetrain(*ESTIMATE, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[-1]["event"] == "result"
    assert any(e["event"] == "progress" for e in events)
    vector = read_efficiency(out)
    assert vector.batch_sizes == [8, 64]
    assert all(s is not None for s in vector.samples_to_accuracy)
    assert vector.r[0] != vector.r[1]  # batch sizes differ in samples to accuracy
    _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    part = EfficiencyPart.model_validate_json(part_file.read_text())
    assert (part.index, part.batch_size, part.seed, part.tag) == (1, 64, 0, "key/uid")
    assert part.samples_to_accuracy == vector.samples_to_accuracy[1]  # each run seeds itself
    b8 = vector.samples_to_accuracy[0]
    assert b8 is not None
    assert vector.seeds == 1 and vector.gradient_noise_scale is not None
    assert part.gradient_noise_scale == vector.gradient_noise_scale[1]  # measured in the run
    first = part.model_copy(update={
        "index": 0, "batch_size": 8, "samples_to_accuracy": b8,
        "gradient_noise_scale": vector.gradient_noise_scale[0]})
    spec = PowerAwareTrainingJobSpec.model_validate({
        "model": {"architecture": "resnet8-w025"}, "dataset": {"name": "digits"},
        "proxyDataset": {"name": "digits"}, "targetAccuracy": 0.6, "batchSizes": [8, 64],
        "budget": {"seeds": [0]}})  # the estimate above trained seed 0 only
    verdict = parts_verdict({"part-0.json": first.model_dump_json(),
                             "part-1.json": part_file.read_text()},
                            tag="key/uid", spec=spec, job_state="succeeded")
    assert verdict.vector == vector  # samples, r, device and precision


def test_one_run_of_an_estimate_is_checked_before_training(tmp_path: Path) -> None:
    out = str(tmp_path / "part.json")
    beyond = run_edgetrain(*ESTIMATE, "--run-index", "2", "--part-of", "k/u", "-o", out)
    assert beyond.returncode == 2 and "--run-index 2 is out of range" in beyond.stderr
    assert "runs 0 to 1" in beyond.stderr
    alone = run_edgetrain(*ESTIMATE, "--run-index", "0", "-o", out)
    assert alone.returncode == 2 and "--run-index and --part-of go together" in alone.stderr
    assert not Path(out).exists()


def test_train_resumes_after_a_kill(tmp_path: Path) -> None:
    args = [
        "train",
        *SMALL,
        "--batch-size",
        "32",
        "--target-accuracy",
        "0.75",
        "--sample-budget",
        "6000",
        "--eval-interval",
        "256",
        "--json-progress",
    ]
    reference = run_edgetrain(*args, "--checkpoint-dir", str(tmp_path / "ref"))
    assert reference.returncode == 0, reference.stderr
    expected = json.loads(reference.stdout.splitlines()[-1])

    ckpt = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgetrain", *args, "--checkpoint-dir", str(ckpt)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:  # kill after the second checkpoint
        event = json.loads(line)
        if event["event"] == "progress":
            seen += 1
            if seen == 2:
                os.kill(proc.pid, signal.SIGKILL)
                break
        assert time.monotonic() < deadline
    proc.wait()
    assert (ckpt / "checkpoint.pt").is_file()

    resumed = run_edgetrain(*args, "--checkpoint-dir", str(ckpt))
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout.splitlines()[-1])
    assert result["resumed_from_samples"] >= 512
    assert result["samples"] == expected["samples"]
    assert math.isclose(result["accuracy"], expected["accuracy"], abs_tol=1e-9)
    # Where the curve crossed, and the noise probes, are an unbroken run's too.
    assert result["samples_to_target"] == expected["samples_to_target"]
    assert result["gradient_noise_scale"] == pytest.approx(expected["gradient_noise_scale"])
    assert expected["samples_to_target"] <= expected["samples"]
    first_progress = next(
        json.loads(line) for line in resumed.stdout.splitlines() if '"progress"' in line
    )
    assert first_progress["samples"] > result["resumed_from_samples"]  # no finished work redone


def test_train_budget_exhausted_exits_4(tmp_path: Path) -> None:
    proc = run_edgetrain(
        "train",
        *SMALL,
        "--batch-size",
        "32",
        "--target-accuracy",
        "0.99",
        "--sample-budget",
        "256",
        "--eval-interval",
        "256",
        "--checkpoint-dir",
        str(tmp_path),
        "--json-progress",
    )
    assert proc.returncode == 4, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["reached_target"] is False


def test_checkpoint_of_another_run_is_bad_input(tmp_path: Path) -> None:
    base = [
        "train",
        *SMALL,
        "--target-accuracy",
        "0.99",
        "--sample-budget",
        "64",
        "--eval-interval",
        "64",
        "--checkpoint-dir",
        str(tmp_path),
        "--json-progress",
    ]
    assert run_edgetrain(*base, "--batch-size", "32").returncode == 4
    other = run_edgetrain(*base, "--batch-size", "16")
    assert other.returncode == 2
    assert "belongs to a different training run" in other.stderr


def test_unknown_dataset_is_bad_input(tmp_path: Path) -> None:
    proc = run_edgetrain(
        "estimate",
        "--model",
        "resnet8-w025",
        "--dataset",
        "cifar10",
        "--batch-sizes",
        "8",
        "--target-accuracy",
        "0.5",
        "-o",
        str(tmp_path / "e.json"),
    )
    assert proc.returncode == 2
    assert "unknown data set 'cifar10'" in proc.stderr
