"""The operator's node cache: lists, watch events, and the reads the reconciler makes."""

from __future__ import annotations

from typing import Any

from edgetrain.kube import KubeClient
from edgetrain.operator.fleet import FleetWatch
from edgetrain.operator.gather import _all_values, _values


def _node(name: str, model: str = "jetson-nano", ready: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"u-{name}",
                         "labels": {"edgetrain.io/device-model": model}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_a_list_replaces_the_fleet_and_events_update_it() -> None:
    fleet = FleetWatch(KubeClient.__new__(KubeClient))  # no API calls in this test
    assert not fleet.listed.is_set()
    fleet.replace([_node("a"), _node("b", "jetson-orin-nano")])
    assert fleet.listed.is_set() and len(fleet) == 2
    assert [n.name for n in _values(fleet, "b")] == ["b"]
    fleet.apply("MODIFIED", _node("b", "jetson-orin-nano", ready=False))
    assert not _values(fleet, "b")[0].schedulable
    fleet.apply("ADDED", _node("c"))
    fleet.apply("DELETED", _node("a"))
    assert sorted(n.name for n in _all_values(fleet)) == ["b", "c"]
    assert _values(fleet, "a") == []  # gone: the reconciler reads "no such node"
    fleet.replace([_node("d")])  # a relist after the watch expired: exactly what it lists
    assert sorted(fleet) == ["d"]
