"""A site's measured draw, pure: where each node's agent serves its metrics (from its pod, as
Prometheus' pod discovery reads it), its power reading in an exposition, and the sum over the
budget's nodes with the nodes left out named (a partial reading is never a silent under-count).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from edgetrain.api.keys import ANNOTATION_PROMETHEUS_PATH, ANNOTATION_PROMETHEUS_PORT

POWER_METRIC = "edgetrain_power_total_watts"


@dataclass(frozen=True)
class MeasuredDraw:
    """The summed readings (None: no node could be read) and the nodes without one."""

    watts: float | None
    missing: tuple[str, ...]


def agent_endpoints(pods: Iterable[Mapping[str, Any]], nodes: Sequence[str]) -> dict[str, str]:
    """Node → the metrics URL of its running node agent, for the budget's nodes that have one.

    The port and path are the pod's `prometheus.io/*` annotations (else its `metrics` port),
    the address its podIP: what a Prometheus with pod discovery scrapes."""
    wanted = set(nodes)
    out: dict[str, str] = {}
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        status = pod.get("status") or {}
        node, ip = spec.get("nodeName"), status.get("podIP")
        if node not in wanted or node in out or not ip or meta.get("deletionTimestamp") \
                or status.get("phase") != "Running":
            continue
        notes = meta.get("annotations") or {}
        port = notes.get(ANNOTATION_PROMETHEUS_PORT) or next(
            (p.get("containerPort") for c in spec.get("containers") or []
             for p in c.get("ports") or [] if p.get("name") == "metrics"), None)
        if not port:
            continue
        path = notes.get(ANNOTATION_PROMETHEUS_PATH) or "/metrics"
        host = f"[{ip}]" if ":" in str(ip) else ip
        out[str(node)] = f"http://{host}:{port}{path if path.startswith('/') else '/' + path}"
    return out


def power_reading(text: str, node: str) -> float | None:
    """The agent's board power for `node` in a Prometheus text exposition (None: absent).

    Raises ValueError on text that is not an exposition."""
    for family in text_string_to_metric_families(text):
        if family.name != POWER_METRIC:
            continue
        values = [s.value for s in family.samples
                  if s.name == POWER_METRIC and s.labels.get("node") == node]
        if values:
            return float(sum(values))
    return None


def measured_draw(nodes: Sequence[str], readings: Mapping[str, float | None]) -> MeasuredDraw:
    """The sum of the readings of the budget's nodes; the nodes without one, sorted."""
    got = [readings[n] for n in nodes if readings.get(n) is not None]
    missing = tuple(sorted(n for n in set(nodes) if readings.get(n) is None))
    return MeasuredDraw(watts=round(sum(r for r in got if r is not None), 3) if got else None,
                        missing=missing)
