"""One job spec -> workload specs -> argv, checked against the real CLI's option parser."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import typer

from edgetrain.api.job import load_job
from edgetrain.api.workload_spec import (
    ProfilingStrategy,
    estimate_argv,
    estimate_spec,
    profile_argv,
    profile_spec,
    train_argv,
    train_spec,
)
from edgetrain.cli import app

ROOT = Path(__file__).resolve().parents[2]


def parsed(command: str, argv: list[str]) -> dict[str, Any]:
    """The values the real `edgetrain <command>` would receive (nothing runs)."""
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    with cmd.make_context(command, [*argv, *REQUIRED_EXTRA.get(command, [])]) as ctx:
        return dict(ctx.params)


REQUIRED_EXTRA = {
    "estimate": ["--output", "x.json"],
    "profile": ["--output", "x.csv"],
    "train": ["--checkpoint-dir", "ck"],
}


@pytest.fixture
def job() -> Any:
    spec = load_job(ROOT / "examples" / "patj-digits.yaml")
    return spec.model_copy(
        update={
            "compute": spec.compute.model_copy(update={"device": "cpu"}),
            "dataset": spec.dataset.model_copy(update={"limit": 500}),
        }
    )


def test_estimate_spec_reaches_the_cli_unchanged(job: Any) -> None:
    spec = estimate_spec(job, Path("/w/start.pt"))
    assert (spec.model, spec.dataset, spec.batch_sizes) == ("resnet8-w025", "digits", [16, 64])
    assert spec.sample_budget == job.budget.estimate_samples
    got = parsed("estimate", estimate_argv(spec))
    assert got["model"] == spec.model and got["dataset"] == spec.dataset
    assert got["batch_sizes"] == "16,64" and got["seeds"] == "0"
    assert got["target_accuracy"] == spec.target_accuracy
    assert got["learning_rate"] == spec.optimizer.learning_rate
    assert got["reference_batch_size"] == spec.optimizer.reference_batch_size
    assert got["lr_scaling"].value == spec.optimizer.scaling.value
    assert (got["sample_budget"], got["eval_interval"], got["eval_samples"]) == (
        spec.sample_budget,
        spec.eval_interval_samples,
        spec.eval_samples,
    )
    assert got["weights"] == Path("/w/start.pt") and got["device"] == "cpu"


def test_profile_spec_reaches_the_cli_unchanged(job: Any) -> None:
    spec = profile_spec(job, min_window_s=0.25, stabilize_window_s=0.4)
    assert spec.strategy is ProfilingStrategy.frontier and spec.power_limit_w == 5.0
    got = parsed("profile", profile_argv(spec))
    assert got["gpu_freqs"] == "307200000,614400000,921600000"
    assert (got["strategy"], got["power_limit"], got["min_window"]) == ("frontier", 5.0, 0.25)
    assert got["stabilize_window"] == 0.4
    assert got["minibatches"] == job.budget.profile_minibatches
    assert got["stabilize_timeout"] == spec.stabilize_timeout_s


def test_profile_without_limit_and_predicted_options(job: Any) -> None:
    unlimited = job.model_copy(update={"power_limit_watts": None})
    spec = profile_spec(unlimited).model_copy(
        update={"strategy": ProfilingStrategy.predicted, "predict_points": 20, "predict_seed": 3}
    )
    got = parsed("profile", profile_argv(spec))
    assert math.isinf(got["power_limit"])
    assert (got["strategy"], got["points"], got["seed"]) == ("predicted", 20, 3)


def test_train_spec_reaches_the_cli_unchanged(job: Any) -> None:
    spec = train_spec(job, 64, None)
    assert spec.dataset_limit == 500 and spec.sample_budget == job.budget.train_samples
    got = parsed("train", train_argv(spec))
    assert (got["batch_size"], got["dataset_limit"], got["seed"]) == (64, 500, 0)
    assert got["weights"] is None and got["precision"] == "fp32"
