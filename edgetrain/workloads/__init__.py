"""Real PyTorch workloads: models, data sets, estimation, profiling and training."""

from __future__ import annotations

from edgetrain.api.workload import WorkloadCost


def workload_cost(
    model: str, input_shape: tuple[int, ...] = (3, 32, 32), num_classes: int = 10
) -> WorkloadCost:
    """`edgetrain.workloads.models.workload_cost`, loading PyTorch only when first called.

    This is the cost function twins are given: tools that only read a twin's tree never count.
    """
    from edgetrain.workloads import models

    return models.workload_cost(model, input_shape, num_classes)
