"""The site's measured draw, pure: agent endpoints from pods, a reading from an exposition,
the sum with the unread nodes named (tables, no cluster)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from edgetrain.node_agent.metrics import AgentMetrics
from edgetrain.operator.budget_measure import (
    MeasuredDraw,
    agent_endpoints,
    measured_draw,
    power_reading,
)


def pod(node: str, ip: str | None = "10.0.0.5", phase: str = "Running",
        annotations: dict[str, str] | None = None, deleting: bool = False,
        ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"agent-{node}", "annotations": annotations
                            if annotations is not None else {"prometheus.io/port": "9101",
                                                             "prometheus.io/path": "/metrics"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": "node-agent",
                                                       "ports": ports or []}]},
            "status": {"phase": phase, "podIP": ip}}


@pytest.mark.parametrize(("pods", "nodes", "expected"), [
    ([pod("n1"), pod("n2", ip="10.0.0.6")], ["n1", "n2"],
     {"n1": "http://10.0.0.5:9101/metrics", "n2": "http://10.0.0.6:9101/metrics"}),
    ([pod("n1"), pod("other")], ["n1"], {"n1": "http://10.0.0.5:9101/metrics"}),  # not ours
    ([pod("n1", phase="Pending")], ["n1"], {}),
    ([pod("n1", ip=None)], ["n1"], {}),
    ([pod("n1", deleting=True), pod("n1", ip="10.0.0.9")], ["n1"],
     {"n1": "http://10.0.0.9:9101/metrics"}),  # the replacement, not the leaving pod
    ([pod("n1", annotations={}, ports=[{"name": "metrics", "containerPort": 9300}])], ["n1"],
     {"n1": "http://10.0.0.5:9300/metrics"}),  # no annotations: the named port
    ([pod("n1", annotations={})], ["n1"], {}),  # no port at all
    ([pod("n1", ip="fd00::5", annotations={"prometheus.io/port": "9101",
                                           "prometheus.io/path": "stats"})], ["n1"],
     {"n1": "http://[fd00::5]:9101/stats"}),
])
def test_agent_endpoints(pods: list[dict[str, Any]], nodes: list[str],
                         expected: dict[str, str]) -> None:
    assert agent_endpoints(pods, nodes) == expected


def agent_exposition(node: str, watts: float | None) -> str:
    """What a real node agent's registry serves."""
    m = AgentMetrics(node, CollectorRegistry())
    if watts is not None:
        m.power_total.labels(node, "input-rail").set(watts)
    return generate_latest(m.registry).decode()


@pytest.mark.parametrize(("text", "node", "expected"), [
    (agent_exposition("n1", 3.25), "n1", 3.25),
    (agent_exposition("n1", None), "n1", None),  # agent up, no reading yet
    (agent_exposition("n2", 3.25), "n1", None),  # another node's agent
    ("", "n1", None),
])
def test_power_reading(text: str, node: str, expected: float | None) -> None:
    assert power_reading(text, node) == expected


def test_power_reading_refuses_what_is_no_exposition() -> None:
    with pytest.raises(ValueError):
        power_reading("<html>not metrics</html>\n", "n1")


@pytest.mark.parametrize(("nodes", "readings", "expected"), [
    (["a", "b", "c"], {"a": 1.5, "b": 2.0, "c": 3.25}, MeasuredDraw(6.75, ())),
    (["a", "b", "c"], {"a": 1.5, "c": 3.25}, MeasuredDraw(4.75, ("b",))),  # partial, named
    (["c", "a", "b"], {"a": 1.5, "b": None, "c": None}, MeasuredDraw(1.5, ("b", "c"))),
    (["a", "b"], {}, MeasuredDraw(None, ("a", "b"))),  # nothing read: no number at all
    ([], {}, MeasuredDraw(None, ())),
    (["a"], {"a": 0.0, "z": 9.0}, MeasuredDraw(0.0, ())),  # a node off the site is not summed
])
def test_measured_draw(nodes: list[str], readings: dict[str, float | None],
                       expected: MeasuredDraw) -> None:
    assert measured_draw(nodes, readings) == expected
