"""Training-side contracts shared by estimate, train and the PowerAwareTrainingJob spec."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from edgetrain.api.enums import StrEnum


class LrScaling(StrEnum):
    """How the learning rate follows the batch size from the reference batch size."""

    sqrt = "sqrt"
    linear = "linear"
    none = "none"


class OptimizerName(StrEnum):
    """Supported optimizers."""

    adam = "adam"
    adamw = "adamw"
    sgd = "sgd"


class Precision(StrEnum):
    """Arithmetic of training: fp32 (default, keeps efficiency vectors comparable) or autocast."""

    fp32 = "fp32"
    fp16 = "fp16"
    bf16 = "bf16"


DEVICE_PATTERN = r"^(auto|cpu|cuda(:[0-9]+)?)$"
"""What `--device` and `spec.compute.device` accept; `auto` is CUDA when present."""


class ComputeSpec(BaseModel):
    """Which device and arithmetic the training phases use (the same on every node)."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )

    device: str = Field(
        default="auto",
        pattern=DEVICE_PATTERN,
        description="auto (CUDA when present), cpu, cuda or cuda:N",
    )
    precision: Precision = Precision.fp32


class OptimizerSpec(BaseModel):
    """Optimizer and learning-rate rule (the paper: Adam, 5e-4 at b=128, square-root scaling)."""

    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    name: OptimizerName = OptimizerName.adam
    learning_rate: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 5.0e-4
    reference_batch_size: Annotated[int, Field(gt=0)] = 128
    scaling: LrScaling = LrScaling.sqrt

    def learning_rate_for(self, batch_size: int) -> float:
        """The learning rate for `batch_size` under the scaling rule."""
        ratio = batch_size / self.reference_batch_size
        if self.scaling is LrScaling.sqrt:
            return self.learning_rate * math.sqrt(ratio)
        if self.scaling is LrScaling.linear:
            return self.learning_rate * ratio
        return self.learning_rate


class DeviceUsage(BaseModel):
    """Device time and energy accumulated by a run."""

    device_time_s: float = 0.0
    energy_j: float | None = None
    peak_power_w: float | None = None
    simulated: bool = False


def crossing_samples(curve: Sequence[tuple[int, float]], target_accuracy: float) -> float | None:
    """Samples where the accuracy curve first reaches the target, interpolated linearly between
    the evaluation below it and the one at or above it (the evaluation grid alone quantises N by
    its interval, 2–7 % of N on the cpu bench). The first evaluation has no point before it:
    its own sample count. None: never reached."""
    previous: tuple[int, float] | None = None
    for samples, accuracy in curve:
        if accuracy >= target_accuracy:
            if previous is None or not accuracy > previous[1]:
                return float(samples)
            s0, a0 = previous
            share = (target_accuracy - a0) / (accuracy - a0)
            return s0 + min(max(share, 0.0), 1.0) * (samples - s0)
        previous = (samples, accuracy)
    return None


class TrainResult(BaseModel):
    """What `edgetrain train` reports at the end (and the operator copies into status)."""

    samples: int
    accuracy: float
    reached_target: bool
    resumed_from_samples: int
    usage: DeviceUsage
    curve: list[tuple[int, float]]
    device: str | None = None  # where this segment trained: cpu, cuda:N
    precision: str | None = None
    samples_to_target: float | None = Field(
        default=None, description="where the curve crossed the target (crossing_samples)"
    )
    gradient_noise_scale: float | None = Field(
        default=None, description="B_simple over the run (planner/noise.py); None: not measured"
    )


class TrainingEvent(BaseModel):
    """A line of the trainer's JSON progress that the operator acts on: a progress tick or the
    final result. The trainer writes it, the worker publishes it, the operator folds it into
    the job's status; other lines (start, plan, text) are not events."""

    model_config = ConfigDict(extra="ignore")

    event: Literal["progress", "result"]
    samples: int
    accuracy: float | None = None
    usage: DeviceUsage | None = None  # absent: the trainer measured nothing
    device: str | None = None
    precision: str | None = None
    reached_target: bool | None = None  # in the result
    resumed_from_samples: int | None = None  # in the result: where this segment started
    samples_to_target: float | None = None  # in the result: the interpolated crossing
    gradient_noise_scale: float | None = None  # in the result: B_simple of the segment

    @classmethod
    def from_line(cls, line: str) -> TrainingEvent | None:
        """The event in one line of trainer output, or None when the line is not one."""
        if not line.lstrip().startswith("{"):
            return None
        try:
            return cls.model_validate_json(line)
        except ValueError:  # another kind of JSON line (start, plan) or a torn write
            return None

    def fields(self) -> dict[str, object]:
        """The line's fields without `event` (the reporter adds the kind and the time)."""
        return self.model_dump(exclude={"event"}, exclude_none=True)
