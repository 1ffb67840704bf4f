"""Planning maths (numpy, no I/O): LUTs, selection, baselines, frontier order, Pareto front."""

from edgetrain.planner.frontier import (
    FrontierResult,
    Measure,
    baseline_column,
    frontier_order,
    profile_frontier,
)
from edgetrain.planner.lut import Lut
from edgetrain.planner.pareto import pareto_front
from edgetrain.planner.plan import (
    InfeasibleError,
    PlanInputError,
    align_efficiency,
    baseline_frequency_for_limit,
    plan,
    safe_frequency_hz,
)
from edgetrain.planner.select import Choice, objective_matrix, select

__all__ = [
    "Choice",
    "FrontierResult",
    "InfeasibleError",
    "Lut",
    "Measure",
    "PlanInputError",
    "align_efficiency",
    "baseline_column",
    "baseline_frequency_for_limit",
    "frontier_order",
    "objective_matrix",
    "pareto_front",
    "plan",
    "profile_frontier",
    "safe_frequency_hz",
    "select",
]
