"""What each workload command runs (estimate, profile, train), made from a job spec in one place.

`edgetrain run` hands these specs to the workloads in-process; the operator turns the same specs
into the argv of `edgetrain estimate|profile|train` in its pods. Both start from the functions
below, so a job field reaches a workload the same way on a laptop and on a cluster. Torch-free:
the operator image carries no PyTorch.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from edgetrain.api.enums import StrEnum
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.api.plan import PowerMetric
from edgetrain.api.training import DEVICE_PATTERN, OptimizerSpec, Precision


class EstimateSpec(BaseModel):
    """What `edgetrain estimate` trains: one run per (batch size, seed) on the proxy set."""

    model_config = ConfigDict(frozen=True)

    model: str
    dataset: str
    batch_sizes: list[Annotated[int, Field(gt=0)]] = Field(min_length=1)
    target_accuracy: Annotated[float, Field(gt=0, le=1)]
    optimizer: OptimizerSpec = OptimizerSpec()
    weights: Path | None = None
    sample_budget: Annotated[int, Field(gt=0)] = 50_000
    eval_interval_samples: Annotated[int, Field(gt=0)] = 512
    eval_samples: Annotated[int, Field(gt=0)] | None = 2000
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    dataset_limit: Annotated[int, Field(gt=0)] | None = None
    device: str = Field(default="auto", pattern=DEVICE_PATTERN)
    precision: Precision = Precision.fp32
    parallel: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="runs side by side; 0: as many as device memory allows (CUDA), 1 on CPU",
    )


class ProfilingStrategy(StrEnum):
    """Which points to measure."""

    frontier = "frontier"
    full = "full"
    predicted = "predicted"  # k points covering (b, full mode), transfer, predict the rest


class ProfileSpec(BaseModel):
    """What `edgetrain profile` measures."""

    model_config = ConfigDict(frozen=True)

    model: str
    dataset: str
    batch_sizes: list[Annotated[int, Field(gt=0)]] = Field(min_length=1)
    gpu_freqs_hz: list[int] | None = None  # None: the board's whole table
    strategy: ProfilingStrategy = ProfilingStrategy.frontier
    power_limit_w: float = math.inf
    power_metric: PowerMetric = PowerMetric.peak
    minibatches: Annotated[int, Field(ge=2)] = 40  # the first is dropped (warm-up)
    min_window_s: Annotated[float, Field(gt=0)] = 1.0
    stabilize_window_s: Annotated[float, Field(gt=0)] = 1.0
    stabilize_spread: Annotated[float, Field(gt=0)] = 0.05
    stabilize_timeout_s: Annotated[float, Field(ge=0)] = 15.0
    dataset_limit: int | None = 2000
    predict_points: Annotated[int, Field(ge=2)] = 50  # k for the predicted strategy
    predict_seed: int = 0
    margin_quantile: Annotated[float, Field(gt=0, le=1)] = 0.9
    predict_epochs: Annotated[int, Field(ge=1)] = 100
    device: str = Field(default="auto", pattern=DEVICE_PATTERN)
    precision: Precision = Precision.fp32


class TrainSpec(BaseModel):
    """What `edgetrain train` runs."""

    model_config = ConfigDict(frozen=True)

    model: str
    dataset: str
    batch_size: Annotated[int, Field(gt=0)]
    target_accuracy: Annotated[float, Field(gt=0, le=1)]
    optimizer: OptimizerSpec = OptimizerSpec()
    weights: Path | None = None
    sample_budget: Annotated[int, Field(gt=0)] = 100_000
    eval_interval_samples: Annotated[int, Field(gt=0)] = 1024
    eval_samples: Annotated[int, Field(gt=0)] | None = 2000
    seed: int = 0
    dataset_limit: Annotated[int, Field(gt=0)] | None = None
    device: str = Field(default="auto", pattern=DEVICE_PATTERN)
    precision: Precision = Precision.fp32

    def key(self) -> str:
        """Identifies the run a checkpoint belongs to (any device or precision may resume it)."""
        identity = self.model_dump_json(exclude={"device", "precision"})
        return hashlib.sha256(identity.encode()).hexdigest()[:16]


# ---------------------------------------------------------------- job spec -> workload specs


def estimate_spec(job: PowerAwareTrainingJobSpec, weights: Path | None) -> EstimateSpec:
    """The proxy estimation of a job (`weights`: the file its runs start from, if any)."""
    return EstimateSpec(
        model=job.model.architecture,
        dataset=job.proxy_dataset.name,
        dataset_limit=job.proxy_dataset.limit,
        batch_sizes=job.batch_sizes,
        target_accuracy=job.target_accuracy,
        optimizer=job.optimizer,
        weights=weights,
        sample_budget=job.budget.estimate_samples,
        eval_interval_samples=job.budget.eval_interval_samples,
        eval_samples=job.budget.eval_samples,
        seeds=job.budget.seeds,
        device=job.compute.device,
        precision=job.compute.precision,
    )


def profile_spec(job: PowerAwareTrainingJobSpec, *, min_window_s: float = 1.0,
                 stabilize_window_s: float = 1.0) -> ProfileSpec:
    """The device profile of a job (`min_window_s`: seconds of power samples per point;
    `stabilize_window_s`: the windows whose means must agree before them)."""
    return ProfileSpec(
        model=job.model.architecture,
        dataset=job.dataset.name,
        batch_sizes=job.batch_sizes,
        gpu_freqs_hz=job.gpu_frequencies_hz,
        strategy=ProfilingStrategy(job.strategy.profiling),
        predict_points=job.strategy.predict_points,
        predict_seed=job.budget.seeds[0],
        power_limit_w=job.power_limit_w,
        power_metric=job.strategy.power_metric,
        minibatches=job.budget.profile_minibatches,
        min_window_s=min_window_s,
        stabilize_window_s=stabilize_window_s,
        device=job.compute.device,
        precision=job.compute.precision,
    )


def train_spec(job: PowerAwareTrainingJobSpec, batch_size: int, weights: Path | None) -> TrainSpec:
    """The fine-tuning of a job at the planned batch size."""
    return TrainSpec(
        model=job.model.architecture,
        dataset=job.dataset.name,
        dataset_limit=job.dataset.limit,
        batch_size=batch_size,
        target_accuracy=job.target_accuracy,
        optimizer=job.optimizer,
        weights=weights,
        sample_budget=job.budget.train_samples,
        eval_interval_samples=job.budget.eval_interval_samples,
        eval_samples=job.budget.eval_samples,
        seed=job.budget.seeds[0],
        device=job.compute.device,
        precision=job.compute.precision,
    )


# ---------------------------------------------------------------- workload specs -> CLI options


def _optimizer_argv(opt: OptimizerSpec) -> list[str]:
    return [
        "--optimizer", opt.name.value,
        "--learning-rate", repr(opt.learning_rate),
        "--reference-batch-size", str(opt.reference_batch_size),
        "--lr-scaling", opt.scaling.value,
    ]  # fmt: skip


def _common_argv(
    spec: EstimateSpec | TrainSpec,
) -> list[str]:
    return [
        *_optimizer_argv(spec.optimizer),
        "--sample-budget", str(spec.sample_budget),
        "--eval-interval", str(spec.eval_interval_samples),
        *(["--eval-samples", str(spec.eval_samples)] if spec.eval_samples is not None else []),
        *(["--dataset-limit", str(spec.dataset_limit)] if spec.dataset_limit else []),
        *(["--weights", str(spec.weights)] if spec.weights is not None else []),
        "--device", spec.device,
        "--precision", spec.precision.value,
    ]  # fmt: skip


def estimate_argv(spec: EstimateSpec) -> list[str]:
    """The options of `edgetrain estimate` that run `spec` (the output path is the caller's)."""
    return [
        "--model", spec.model,
        "--dataset", spec.dataset,
        "--batch-sizes", ",".join(str(b) for b in spec.batch_sizes),
        "--target-accuracy", repr(spec.target_accuracy),
        "--seeds", ",".join(str(s) for s in spec.seeds),
        *_common_argv(spec),
        *(["--parallel", str(spec.parallel)] if spec.parallel else []),
    ]  # fmt: skip


def profile_argv(spec: ProfileSpec) -> list[str]:
    """The options of `edgetrain profile` that run `spec` (the output path is the caller's)."""
    limit = "inf" if math.isinf(spec.power_limit_w) else repr(spec.power_limit_w)
    predicted = spec.strategy is ProfilingStrategy.predicted
    return [
        "--model", spec.model,
        "--dataset", spec.dataset,
        "--batch-sizes", ",".join(str(b) for b in spec.batch_sizes),
        *(["--gpu-freqs", ",".join(str(f) for f in spec.gpu_freqs_hz)]
          if spec.gpu_freqs_hz else []),
        "--strategy", spec.strategy.value,
        "--power-limit", limit,
        "--power-metric", spec.power_metric.value,
        "--minibatches", str(spec.minibatches),
        "--min-window", repr(spec.min_window_s),
        "--stabilize-window", repr(spec.stabilize_window_s),
        "--stabilize-timeout", repr(spec.stabilize_timeout_s),
        *(["--points", str(spec.predict_points), "--seed", str(spec.predict_seed),
           "--margin-quantile", repr(spec.margin_quantile), "--epochs", str(spec.predict_epochs)]
          if predicted else []),
        "--device", spec.device,
        "--precision", spec.precision.value,
    ]  # fmt: skip


def train_argv(spec: TrainSpec) -> list[str]:
    """The options of `edgetrain train` that run `spec` (checkpoints and pinning are the
    caller's)."""
    return [
        "--model", spec.model,
        "--dataset", spec.dataset,
        "--batch-size", str(spec.batch_size),
        "--target-accuracy", repr(spec.target_accuracy),
        "--seed", str(spec.seed),
        *_common_argv(spec),
    ]  # fmt: skip
