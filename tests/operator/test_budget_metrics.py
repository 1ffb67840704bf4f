"""The operator's PowerBudget gauges: a status becomes series; a deleted budget's go away."""

from __future__ import annotations

from prometheus_client import generate_latest

from edgetrain.api.budget import BudgetAllocationStatus, PowerBudgetStatus
from edgetrain.operator.budget_metrics import BudgetMetrics


def test_series_follow_the_status() -> None:
    m = BudgetMetrics()
    m.update("farm", PowerBudgetStatus(
        cap_watts=9, idle_watts=1.2, planned_watts=8.5, nodes=["n1", "n2"],
        allocations=[BudgetAllocationStatus(namespace="ns", name="a", node="n1", watts=3.5),
                     BudgetAllocationStatus(namespace="ns", name="b", node="n2")]))
    text = generate_latest(m.registry).decode()
    assert 'edgetrain_budget_cap_watts{budget="farm"} 9.0' in text
    assert 'edgetrain_budget_planned_watts{budget="farm"} 8.5' in text
    assert ('edgetrain_budget_allocation_watts{budget="farm",job="a",namespace="ns",node="n1"}'
            ' 3.5') in text
    assert 'job="b",namespace="ns",node="n2"} 0.0' in text  # waiting
    assert 'edgetrain_budget_node_info{budget="farm",node="n2"} 1.0' in text
    assert "edgetrain_budget_measured_watts{" not in text  # never read: no number
    m.update("farm", PowerBudgetStatus(cap_watts=9, nodes=["n1", "n2"], measured_watts=2.5,
                                       unmeasured_nodes=["n2"]))
    text = generate_latest(m.registry).decode()
    assert 'edgetrain_budget_measured_watts{budget="farm"} 2.5' in text
    assert 'edgetrain_budget_unmeasured_node_info{budget="farm",node="n2"} 1.0' in text
    m.update("farm", PowerBudgetStatus(cap_watts=6, nodes=["n1"], measured_watts=1.5))
    text = generate_latest(m.registry).decode()
    assert 'job="a"' not in text and 'node="n2"' not in text
    assert 'edgetrain_budget_measured_watts{budget="farm"} 1.5' in text
    m.forget("farm")
    assert "farm" not in generate_latest(m.registry).decode()
