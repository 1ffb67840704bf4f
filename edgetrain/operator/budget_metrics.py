"""Prometheus gauges of the PowerBudgets (cap, idle, planned and measured draw, each job's
share, the nodes whose agent gave no reading).

The measured draw is the operator's own sum of the node agents' `edgetrain_power_total_watts`
(it scrapes them as Prometheus does), so the cap, the plan and the draw come from one process
at one moment, and a node it could not read is named, not silently left out.
"""

from __future__ import annotations

import contextlib
import threading

from prometheus_client import CollectorRegistry, Gauge

from edgetrain.api.budget import PowerBudgetStatus


class BudgetMetrics:
    """The gauges, one registry; `update` replaces a budget's series, `forget` drops them."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.cap = Gauge("edgetrain_budget_cap_watts", "A PowerBudget's cap now", ["budget"],
                         registry=r)
        self.idle = Gauge("edgetrain_budget_idle_watts",
                          "Idle draw of the budget's nodes that run no job", ["budget"],
                          registry=r)
        self.planned = Gauge("edgetrain_budget_planned_watts",
                             "Planned site draw (idle nodes + every job's committed share)",
                             ["budget"], registry=r)
        self.measured = Gauge("edgetrain_budget_measured_watts",
                              "Measured site draw: the node agents' board power summed "
                              "(partial: see edgetrain_budget_unmeasured_node_info)",
                              ["budget"], registry=r)
        self.unmeasured = Gauge("edgetrain_budget_unmeasured_node_info",
                                "A node of the budget whose agent gave no reading (value 1)",
                                ["budget", "node"], registry=r)
        self.share = Gauge("edgetrain_budget_allocation_watts",
                           "A job's granted share (0: waiting)",
                           ["budget", "namespace", "job", "node"], registry=r)
        self.node = Gauge("edgetrain_budget_node_info", "A node under the budget (value 1)",
                          ["budget", "node"], registry=r)
        self._lock = threading.Lock()
        self._series: dict[str, tuple[list[tuple[str, ...]], ...]] = {}

    def update(self, budget: str, status: PowerBudgetStatus) -> None:
        """The budget's series from its status."""
        with self._lock:
            self._drop(budget)
            self.cap.labels(budget).set(status.cap_watts or 0.0)
            self.idle.labels(budget).set(status.idle_watts or 0.0)
            self.planned.labels(budget).set(status.planned_watts or 0.0)
            shares: list[tuple[str, ...]] = [(budget, a.namespace, a.name, a.node)
                                             for a in status.allocations]
            for share, a in zip(shares, status.allocations, strict=True):
                self.share.labels(*share).set(a.watts or 0.0)
            nodes: list[tuple[str, ...]] = [(budget, n) for n in status.nodes]
            for node in nodes:
                self.node.labels(*node).set(1)
            if status.measured_watts is None:
                with contextlib.suppress(KeyError):
                    self.measured.remove(budget)
            else:
                self.measured.labels(budget).set(status.measured_watts)
            missing: list[tuple[str, ...]] = [(budget, n) for n in status.unmeasured_nodes]
            for node in missing:
                self.unmeasured.labels(*node).set(1)
            self._series[budget] = (shares, nodes, missing)

    def forget(self, budget: str) -> None:
        """Drop a deleted budget's series."""
        with self._lock:
            self._drop(budget)
            for gauge in (self.cap, self.idle, self.planned, self.measured):
                with contextlib.suppress(KeyError):
                    gauge.remove(budget)

    def _drop(self, budget: str) -> None:
        shares, nodes, missing = self._series.pop(budget, ([], [], []))
        for labels in shares:
            self.share.remove(*labels)
        for labels in nodes:
            self.node.remove(*labels)
        for labels in missing:
            self.unmeasured.remove(*labels)


BUDGET_METRICS = BudgetMetrics()
