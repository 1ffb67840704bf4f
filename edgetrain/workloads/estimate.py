"""Proxy estimation (first paper, §4.2): samples to the target accuracy for each batch size."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Annotated

import torch
from pydantic import BaseModel, ConfigDict, Field

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.training import OptimizerSpec
from edgetrain.workloads.progress import Reporter
from edgetrain.workloads.training import (
    Task,
    configure_threads,
    load_task,
    make_model,
    make_optimizer,
    train_to_target,
)
from edgetrain.workloads.weights import load_pretrained


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


def samples_to_accuracy_once(
    spec: EstimateSpec, task: Task, batch_size: int, seed: int, reporter: Reporter | None
) -> int | None:
    """Train one (batch size, seed); the samples at the first evaluation at the target."""
    torch.manual_seed(seed)
    model = make_model(spec.model, task)
    if spec.weights is not None:
        load_pretrained(model, spec.weights)
    optimizer = make_optimizer(spec.optimizer, model, batch_size)
    state = train_to_target(
        model,
        optimizer,
        task,
        batch_size=batch_size,
        target_accuracy=spec.target_accuracy,
        sample_budget=spec.sample_budget,
        eval_interval_samples=spec.eval_interval_samples,
        seed=seed,
        eval_samples=spec.eval_samples,
        on_eval=(
            (
                lambda s: reporter.advance(
                    s.samples,
                    f"b={batch_size} seed={seed} acc {s.accuracy:.3f}",
                    batch_size=batch_size,
                    seed=seed,
                    accuracy=s.accuracy,
                )
            )
            if reporter
            else None
        ),
    )
    return state.samples if state.reached_target else None


def median_samples(runs: list[int | None]) -> float | None:
    """Median over seeds, a miss counting as infinitely many samples; None if the median missed."""
    value = statistics.median(float("inf") if r is None else float(r) for r in runs)
    return None if value == float("inf") else value


def estimate(spec: EstimateSpec, reporter: Reporter | None = None) -> EfficiencyVector:
    """Train every batch size (and seed) to the target; the efficiency vector of the contract."""
    configure_threads()
    task = load_task(spec.dataset, spec.dataset_limit)
    samples: list[float | None] = []
    for b in spec.batch_sizes:
        runs = []
        for seed in spec.seeds:
            if reporter:
                reporter.start(
                    f"estimate b={b} seed={seed}", spec.sample_budget, batch_size=b, seed=seed
                )
            runs.append(samples_to_accuracy_once(spec, task, b, seed, reporter))
            if reporter:
                reporter.event("run", batch_size=b, seed=seed, samples_to_accuracy=runs[-1])
        samples.append(median_samples(runs))
    return EfficiencyVector.from_samples(
        model=spec.model,
        dataset=spec.dataset,
        target_accuracy=spec.target_accuracy,
        batch_sizes=spec.batch_sizes,
        samples_to_accuracy=samples,
    )
