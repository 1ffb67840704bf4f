"""Node agent (DaemonSet on Jetson nodes): pins the GPU frequency for pods that ask, guards
their power limit, labels its Node and exports power, frequency and temperature metrics."""

from __future__ import annotations

from edgetrain.node_agent.agent import AgentConfig, NodeAgent
from edgetrain.node_agent.logic import (
    Desired,
    GuardDecision,
    PodRequest,
    guard_decision,
    reconcile,
    target_range,
)
from edgetrain.node_agent.metrics import METRIC_NAMES

__all__ = [
    "METRIC_NAMES",
    "AgentConfig",
    "Desired",
    "GuardDecision",
    "NodeAgent",
    "PodRequest",
    "guard_decision",
    "reconcile",
    "target_range",
]
