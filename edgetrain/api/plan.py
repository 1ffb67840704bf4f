"""The plan contract: the chosen (batch size, power mode) and the baselines it beats."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from edgetrain.api.enums import StrEnum


class PowerMetric(StrEnum):
    """Which profiled power the limit is checked against."""

    peak = "peak"
    mean = "mean"


class Objective(StrEnum):
    """What the planner minimises under the power limit."""

    time = "time"
    energy = "energy"


class PlanPoint(BaseModel):
    """One operating point with its predicted cost."""

    model_config = ConfigDict(frozen=True)

    batch_size: int
    gpu_freq_hz: int
    cpu_freq_hz: int | None = None
    cpu_cores: int | None = None
    emc_freq_hz: int | None = None
    relative_time: float = Field(
        description="time_per_sample_s × r: proportional to time to accuracy"
    )
    power_w: float = Field(description="profiled power under the plan's power metric")
    time_per_sample_s: float
    r: float
    relative_energy_j: float = Field(description="mean_power_w × time_per_sample_s × r")
    predicted_seconds: float | None = Field(
        default=None,
        description="time_per_sample_s × samples_to_accuracy: predicted time to accuracy",
    )
    within_limit: bool


class BaselinePoint(PlanPoint):
    """A baseline's point and how much slower (or costlier) it is than the plan."""

    ratio_to_plan: float = Field(description="baseline objective / plan objective (>1: plan wins)")


class PlanResult(PlanPoint):
    """What `edgetrain plan --json` prints."""

    power_limit_w: float | None = Field(description="null means no limit")
    power_metric: PowerMetric
    objective: Objective
    profiled_points: int
    feasible_points: int
    baselines: dict[str, BaselinePoint]
    warnings: list[str] = Field(default_factory=list)
