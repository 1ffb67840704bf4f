"""The PowerAwareTrainingJob spec: one pydantic model for the CRD, `edgetrain run`, the operator."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from edgetrain.api.errors import InputError, read_input_text
from edgetrain.api.names import (
    DATASET_NAMES,
    DEVICE_PATTERN,
    FILE_PATTERN,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_MAX,
    LABEL_VALUE_PATTERN,
    MODEL_ARCHITECTURES,
    PROFILING_STRATEGIES,
)
from edgetrain.api.plan import Objective, PowerMetric
from edgetrain.api.training import ComputeSpec, OptimizerSpec, Precision

API_VERSION = "edgetrain.io/v1alpha1"
# Bump when what `edgetrain profile` measures changes, so cached profiles are not reused.
PROFILER_VERSION = 2
KIND = "PowerAwareTrainingJob"


class _Spec(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


# Names are plain strings to the model (`edgetrain run` reports an unknown one with the known
# list, pipeline/validate.py) and enums or patterns to the API server (the CRD), so
# `kubectl apply` refuses a typo before the operator sees it.
def _one_of(names: tuple[str, ...]) -> dict[str, JsonValue]:
    return {"enum": list(names)}


class PretrainSpecRef(_Spec):
    """Make starting weights with `edgetrain pretrain` when no weights file is given."""

    dataset: str = Field(json_schema_extra=_one_of(DATASET_NAMES))
    samples: Annotated[int, Field(gt=0)] = 20_000


class ModelSpec(_Spec):
    """The network to fine-tune."""

    architecture: str = Field(min_length=1, json_schema_extra=_one_of(MODEL_ARCHITECTURES))
    weights: str | None = Field(
        default=None,
        description="path to a weights file",
        max_length=1024,
        json_schema_extra={"pattern": FILE_PATTERN},
    )
    pretrain: PretrainSpecRef | None = None


class DatasetSpec(_Spec):
    """A data set by name (offline sets: see docs/workloads.md), optionally a fixed subset."""

    name: str = Field(min_length=1, json_schema_extra=_one_of(DATASET_NAMES))
    limit: Annotated[int, Field(gt=0)] | None = None


class PlacementSpec(_Spec):
    """Where to run: node labels in a cluster; `device` for a standalone run."""

    node_selector: dict[
        Annotated[str, Field(pattern=LABEL_KEY_PATTERN, max_length=317)],
        Annotated[str, Field(pattern=LABEL_VALUE_PATTERN, max_length=LABEL_VALUE_MAX)],
    ] = Field(default_factory=dict, description="node labels (key: value) every node must carry")
    device: str = Field(
        default="sim:jetson-nano",
        json_schema_extra={"pattern": DEVICE_PATTERN},
        description="standalone runs: 'sim:<board>' for a device twin, or 'local' for this"
        " machine's /sys (a Jetson)",
    )


class StrategySpec(_Spec):
    """How to profile and what to minimise."""

    profiling: str = Field(
        default="frontier",
        pattern="^(" + "|".join(PROFILING_STRATEGIES) + ")$",
        json_schema_extra=_one_of(PROFILING_STRATEGIES),
    )
    objective: Objective = Objective.time
    power_metric: PowerMetric = PowerMetric.peak
    # PowerTrain's point: a few measured modes, transferred, predict thousands (the paper used
    # ~50; the job default stays at 20 so profiling costs little next to the training it plans).
    predict_points: int = Field(
        default=20,
        ge=2,
        le=200,
        description="profiling: predicted — power modes measured on the device; the rest of"
        " the (batch size, power mode) grid is predicted",
    )
    learn_from_history: bool = Field(
        default=True,
        description="plan from a posterior r: the proxy's r corrected by the samples to target"
        " that earlier jobs with the same model, target set and target accuracy observed",
    )
    expected_recurrences: int = Field(
        default=10,
        ge=1,
        le=100_000,
        description="learnFromHistory: how many jobs with this model, target set and target"
        " accuracy to expect, this one included; trying another batch size pays back over them",
    )
    exploration_budget: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="learnFromHistory: trying another batch size may cost at worst this share"
        " of the planned size's training time, cumulatively over the jobs (0: never explore)",
    )


#: The seeds an estimate merges by default (issue 41): the paper bench's trade-off (docs/planner.md)
#: — 3 seeds take most of what 4 give to the first plan, at three quarters of their server time.
DEFAULT_ESTIMATE_SEEDS = (0, 1, 2)


class BudgetSpec(_Spec):
    """How much training each phase may spend (samples), and how often to evaluate."""

    estimate_samples: Annotated[int, Field(gt=0)] = 20_000
    train_samples: Annotated[int, Field(gt=0)] = 100_000
    eval_interval_samples: Annotated[int, Field(gt=0)] = 512
    eval_samples: Annotated[int, Field(gt=0)] = 2000
    profile_minibatches: Annotated[int, Field(ge=2)] = 10
    seeds: list[int] = Field(
        default_factory=lambda: list(DEFAULT_ESTIMATE_SEEDS),
        min_length=1,
        description="the estimate trains every batch size with each seed (one pod per (batch"
        " size, seed)) and merges them; the first also seeds the training",
    )


class PowerAwareTrainingJobSpec(_Spec):
    """spec of a PowerAwareTrainingJob."""

    model: ModelSpec
    dataset: DatasetSpec
    proxy_dataset: DatasetSpec
    target_accuracy: Annotated[float, Field(gt=0, le=1)]
    power_limit_watts: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="null: no limit; may change while training (re-plan)"
    )
    batch_sizes: list[Annotated[int, Field(gt=0)]] = Field(
        default_factory=lambda: [4, 8, 16, 32, 64, 128], min_length=1
    )
    gpu_frequencies_hz: list[Annotated[int, Field(gt=0)]] | None = Field(
        default=None, description="subset of the GPU table to profile; null: the whole table"
    )
    optimizer: OptimizerSpec = OptimizerSpec()
    placement: PlacementSpec = PlacementSpec()
    strategy: StrategySpec = StrategySpec()
    budget: BudgetSpec = BudgetSpec()
    compute: ComputeSpec = ComputeSpec()
    worker_start_deadline_seconds: Annotated[int, Field(gt=0)] | None = Field(
        default=None,
        description="how long a worker pod may stay refused (Pod Security, quota), unscheduled"
        " or without its image before the job fails with that reason (the reason shows in"
        " status at once); null: the operator's unschedulable grace (600 s by default)",
    )

    @field_validator("batch_sizes")
    @classmethod
    def _unique(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError(f"batch sizes must be unique, got {value}")
        return sorted(value)

    @property
    def power_limit_w(self) -> float:
        """The limit as a number (inf when none)."""
        return math.inf if self.power_limit_watts is None else self.power_limit_watts


def _hash(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def efficiency_cache_key(spec: PowerAwareTrainingJobSpec, weights_sha256: str | None) -> str:
    """Efficiency vectors are shared by model, weights, proxy, batch sizes, optimizer, target."""
    return _hash(
        {
            "model": spec.model.architecture,
            "weights": weights_sha256,
            "proxy": spec.proxy_dataset.model_dump(),
            "batch_sizes": spec.batch_sizes,
            "optimizer": spec.optimizer.model_dump(mode="json"),
            "target": spec.target_accuracy,
            "budget": [
                spec.budget.estimate_samples,
                spec.budget.eval_interval_samples,
                spec.budget.eval_samples,
                spec.budget.seeds,
            ],
            # Only a non-default precision enters the key, so fp32 vectors keep their old keys.
            **(
                {}
                if spec.compute.precision is Precision.fp32
                else {"precision": spec.compute.precision.value}
            ),
        }
    )


def profile_cache_key(
    spec: PowerAwareTrainingJobSpec,
    device_model: str,
    l4t: str | None,
    input_shape: tuple[int, ...] | None,
    *,
    dataset: str | None = None,
) -> str:
    """Profiles are shared by (device model, L4T, model, input shape, batch sizes, what was swept).

    A frontier profile depends on the limit it was cut at, so the limit is part of its key.
    The operator, which never loads data, names the input by its data set (`input_shape=None`,
    `dataset=spec.dataset.name`) instead of its shape.
    """
    extra: dict[str, Any] = {} if dataset is None else {"dataset": dataset}
    # Timing depends on device and precision; defaults stay out so old profiles keep their keys.
    if spec.compute != ComputeSpec():
        extra["compute"] = spec.compute.model_dump(mode="json")
    return _hash(
        {
            **extra,
            "device": device_model,
            "l4t": l4t,
            "model": spec.model.architecture,
            "input_shape": None if input_shape is None else list(input_shape),
            "batch_sizes": spec.batch_sizes,
            "freqs": spec.gpu_frequencies_hz,
            "strategy": spec.strategy.profiling,
            "limit": spec.power_limit_watts if spec.strategy.profiling == "frontier" else None,
            "metric": spec.strategy.power_metric.value,
            "profiler": PROFILER_VERSION,
            # Predicted tables depend on which modes were measured; other keys stay unchanged.
            **(
                {"predict": [spec.strategy.predict_points, spec.budget.seeds[0]]}
                if spec.strategy.profiling == "predicted"
                else {}
            ),
        }
    )


def load_job(path: str | Path) -> PowerAwareTrainingJobSpec:
    """Read a job YAML: a whole PowerAwareTrainingJob manifest, or just its spec."""
    file = Path(path)
    try:
        data = yaml.safe_load(read_input_text(file))
    except yaml.YAMLError as exc:
        raise InputError(file, f"not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise InputError(file, "expected a mapping (a PowerAwareTrainingJob or its spec)")
    if "kind" in data:
        if data.get("kind") != KIND:
            raise InputError(file, f"kind is {data.get('kind')!r}, expected {KIND}", field="kind")
        data = data.get("spec") or {}
        prefix = "spec."
    else:
        prefix = ""
    try:
        return PowerAwareTrainingJobSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = prefix + ".".join(str(p) for p in err["loc"])
        raise InputError(file, err["msg"].removeprefix("Value error, "), field=where) from None
