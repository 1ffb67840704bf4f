"""Training-side contracts shared by estimate, train and the PowerAwareTrainingJob spec."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


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
