"""The training cost of a workload: what the device twin needs to simulate a model.

Counting it needs the PyTorch models (`edgetrain.workloads.models.workload_cost`); the twin and
the predictor take the result, or a function returning it, so they never import the models.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

#: Bump when the way costs are computed changes, so stale disk-cache entries are ignored.
COST_MODEL_VERSION = 1


class WorkloadCost(BaseModel):
    """Training cost of one sample for a model at an input shape (forward + backward)."""

    model_config = ConfigDict(frozen=True)

    model: str
    input_shape: tuple[int, ...]
    num_classes: int
    flops_per_sample: float
    forward_flops_per_sample: float
    activation_bytes_per_sample: float
    param_count: int
    param_bytes: int
    cost_model_version: int = COST_MODEL_VERSION


#: `(model, input_shape, num_classes) -> cost`, e.g. `edgetrain.workloads.models.workload_cost`.
CostFunction = Callable[[str, tuple[int, ...], int], WorkloadCost]
