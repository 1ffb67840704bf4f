"""Proxy estimation (first paper, §4.2): samples to the target accuracy for each batch size."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Annotated

import torch
from pydantic import BaseModel, ConfigDict, Field

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.errors import BadInputError
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


class TargetNotReachedError(BadInputError):
    """No batch size reached the target within the sample budget: the user's budget or target."""

    def __init__(self, spec: EstimateSpec, best: dict[int, float]) -> None:
        self.best_accuracy = best
        reached = ", ".join(f"b={b}: {acc:.3f}" for b, acc in best.items())
        super().__init__(
            f"no batch size reached target accuracy {spec.target_accuracy:g} on"
            f" {spec.dataset!r} within {spec.sample_budget} samples (best accuracy {reached});"
            " raise the sample budget (--sample-budget / budget.estimateSamples) or lower the"
            " target (--target-accuracy / targetAccuracy)"
        )


def samples_to_accuracy_once(
    spec: EstimateSpec, task: Task, batch_size: int, seed: int, reporter: Reporter | None
) -> tuple[int | None, float]:
    """Train one (batch size, seed); the samples at the first evaluation at the target (None
    if never), and the best accuracy seen."""
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
    best = max((acc for _s, acc in state.curve), default=0.0)
    return (state.samples if state.reached_target else None), best


def median_samples(runs: list[int | None]) -> float | None:
    """Median over seeds, a miss counting as infinitely many samples; None if the median missed."""
    value = statistics.median(float("inf") if r is None else float(r) for r in runs)
    return None if value == float("inf") else value


def estimate(spec: EstimateSpec, reporter: Reporter | None = None) -> EfficiencyVector:
    """Train every batch size (and seed) to the target; the efficiency vector of the contract."""
    configure_threads()
    task = load_task(spec.dataset, spec.dataset_limit)
    samples: list[float | None] = []
    best: dict[int, float] = {}
    for b in spec.batch_sizes:
        runs: list[int | None] = []
        for seed in spec.seeds:
            if reporter:
                reporter.start(
                    f"estimate b={b} seed={seed}", spec.sample_budget, batch_size=b, seed=seed
                )
            reached, accuracy = samples_to_accuracy_once(spec, task, b, seed, reporter)
            runs.append(reached)
            best[b] = max(best.get(b, 0.0), accuracy)
            if reporter:
                reporter.event("run", batch_size=b, seed=seed, samples_to_accuracy=runs[-1])
        samples.append(median_samples(runs))
    if all(s is None for s in samples):
        raise TargetNotReachedError(spec, best)
    return EfficiencyVector.from_samples(
        model=spec.model,
        dataset=spec.dataset,
        target_accuracy=spec.target_accuracy,
        batch_sizes=spec.batch_sizes,
        samples_to_accuracy=samples,
    )
