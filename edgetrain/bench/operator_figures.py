"""The operator's own figures in `edgetrain bench operator`: from its decision log
(`operator/decisions.py`, one JSON line per reconcile) the time from the watch event that woke
a reconcile to its first decisive write, the queue wait apart, the requests it sent one after
another until then, and its CPU time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from edgetrain.operator.decisions import read_log


class Spread(BaseModel):
    """p50 / p95 / max of one figure (None: no value)."""

    count: int
    p50: float | None
    p95: float | None
    max: float | None
    mean: float | None = None


def spread(values: Sequence[float]) -> Spread:
    """The percentiles of `values` (rounded)."""
    if not values:
        return Spread(count=0, p50=None, p95=None, max=None)
    arr = np.asarray(values, dtype=float)
    return Spread(count=len(values), p50=round(float(np.percentile(arr, 50)), 4),
                  p95=round(float(np.percentile(arr, 95)), 4), max=round(float(arr.max()), 4),
                  mean=round(float(arr.mean()), 5))


class OperatorFigures(BaseModel):
    """What the operator says of its decisions in the jobs' window."""

    reconciles: int  # every reconcile, decided or not
    decisions: int  # reconciles that sent a decisive write
    decision_s: Spread  # watch event received → first decisive write sent
    queue_s: Spread  # watch event received → reconcile started (of the decisions)
    serial_requests: Spread  # requests one after another up to the decisive write (incl.)
    cpu_s: Spread  # thread CPU of each decision's reconcile
    by_cause: dict[str, Spread]  # decision_s per wake-up cause (start, configmap, job, …)
    idle_requests: int  # requests of the reconciles that decided nothing
    # The bench's watch saw a job created → the operator's loop for it woke (both monotonic
    # clocks of this host): how long kopf took to hand the operator the new job.
    start_delivery_s: Spread | None = None


def operator_figures(path: Path, start_epoch: float, end_epoch: float,
                     seen: dict[str, float] | None = None) -> OperatorFigures:
    """Summarise the decision log's records that ended within [start, end] (unix s); `seen`:
    job name → when the bench's watch saw it created (time.monotonic)."""
    records: list[dict[str, Any]] = [r for r in read_log(path)
                                     if start_epoch <= float(r.get("at") or 0) <= end_epoch]
    decided = [r for r in records if r.get("decision_s") is not None]
    causes: dict[str, list[float]] = {}
    for r in decided:
        causes.setdefault(str(r.get("cause")), []).append(float(r["decision_s"]))
    return OperatorFigures(
        reconciles=len(records),
        decisions=len(decided),
        decision_s=spread([float(r["decision_s"]) for r in decided]),
        queue_s=spread([float(r["queue_s"]) for r in decided]),
        serial_requests=spread([float(r["serial_requests"]) for r in decided
                                if r.get("serial_requests") is not None]),
        cpu_s=spread([float(r["cpu_s"]) for r in decided]),
        by_cause={k: spread(v) for k, v in sorted(causes.items())},
        idle_requests=sum(int(r.get("requests") or 0) for r in records
                          if r.get("decision_s") is None),
        start_delivery_s=None if seen is None else spread([
            float(r["woke_mono"]) - seen[name] for r in records
            if r.get("cause") == "start" and r.get("woke_mono")
            and (name := str(r.get("job", "")).rpartition("/")[2]) in seen]),
    )

