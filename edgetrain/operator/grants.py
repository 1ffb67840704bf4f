"""A site budget's grants as a small pure state machine: issue → acknowledge → raise.

The invariant (docs/operator.md, "Site budgets"): at every instant, the site's idle draw plus,
for each node, the highest limit that anything on it may still act on stays ≤ the cap. What a
node's job may still act on is its `held_w`: the grant it acknowledged and every grant issued to
it since (it may be planning under any of them); pods that have not ended count at their own
limit (a profiling pod's sweep ceiling included). Lowering a grant is issued at once: the job
keeps its older grant in `held_w` until it echoes the new sequence number, and its older pods
count until they end. A raise, or a new grant, is issued only when the sum with it still fits.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from edgetrain.api.budget import GrantPurpose
from edgetrain.api.keys import ANNOTATION_POWER_LIMIT_WATTS
from edgetrain.planner.budget import EPS_W


@dataclass(frozen=True)
class Rules:
    """The handshake's rules, all on. The model check takes each away in turn to show that the
    cap holds only with all of them (tests/operator/test_budget_model.py)."""

    acknowledge_by_sequence: bool = True  # an older grant is released only by the echo
    count_pods: bool = True  # pods that have not ended count at their limit
    current_grants_win_ties: bool = True  # among equal splits, the current one


ALL_RULES = Rules()


@dataclass(frozen=True)
class GrantRecord:
    """What the budget has issued to one job, as its status keeps it."""

    job: str  # namespace/name
    node: str
    watts: float | None = None  # the grant issued last (None: none, or withdrawn)
    sequence: int = 0  # that grant's sequence number (0: never issued)
    acknowledged: int = 0  # the highest sequence the job has echoed
    held_w: float | None = None  # the most it may still act on
    purpose: GrantPurpose = "train"


@dataclass(frozen=True)
class PodLimit:
    """A worker pod on a site node that has not ended, or a workload whose pods may still come:
    it counts at its `edgetrain.io/power-limit-watts` (None: it carries none)."""

    node: str
    watts: float | None
    name: str = ""


def pod_limits(pods: Iterable[Mapping[str, Any]], nodes: Collection[str]) -> list[PodLimit]:
    """The pods on `nodes` that have not ended (a pod being deleted still runs until it is
    gone), each at its power limit annotation; the agent's parser reads it the same way."""
    wanted = set(nodes)
    out: list[PodLimit] = []
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName") or ""
        phase = (pod.get("status") or {}).get("phase")
        if node not in wanted or phase in ("Succeeded", "Failed"):
            continue
        meta = pod.get("metadata") or {}
        raw = (meta.get("annotations") or {}).get(ANNOTATION_POWER_LIMIT_WATTS)
        out.append(PodLimit(node, _watts(raw), str(meta.get("name") or "")))
    return out


def _watts(raw: object) -> float | None:
    try:
        value = float(str(raw))
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def acknowledge(record: GrantRecord, echoed: int, rules: Rules = ALL_RULES) -> GrantRecord:
    """The job echoes `echoed` (a stale view may echo less than seen before: kept monotone).
    Its echo of the last grant issued releases every older one."""
    acked = max(record.acknowledged, min(echoed, record.sequence))
    record = replace(record, acknowledged=acked)
    if not rules.acknowledge_by_sequence or (record.sequence and acked == record.sequence):
        return replace(record, held_w=record.watts)
    return record


def issue(record: GrantRecord, watts: float | None, sequence: int, node: str,
          purpose: GrantPurpose, rules: Rules = ALL_RULES) -> GrantRecord:
    """A new grant to the job: it may act on it from now on, and on what it held until its echo."""
    held = _max(record.held_w, watts)
    if not rules.acknowledge_by_sequence:
        held = watts
    return replace(record, node=node, watts=watts, sequence=sequence, held_w=held,
                   purpose=purpose)


def node_draw_w(records: Iterable[GrantRecord], pods: Iterable[PodLimit],
                node_idle_w: Mapping[str, float], rules: Rules = ALL_RULES) -> dict[str, float]:
    """Per site node: the highest limit anything there may act on, at least its idle draw."""
    out = dict(node_idle_w)
    for rec in records:
        if rec.held_w is not None and rec.node in out:
            out[rec.node] = max(out[rec.node], rec.held_w)
    if rules.count_pods:
        for pod in pods:
            if pod.watts is not None and pod.node in out:
                out[pod.node] = max(out[pod.node], pod.watts)
    return out


def authorised_w(records: Iterable[GrantRecord], pods: Iterable[PodLimit],
                 node_idle_w: Mapping[str, float], rules: Rules = ALL_RULES) -> float:
    """The invariant's left-hand side: the sum of `node_draw_w`."""
    return sum(node_draw_w(records, pods, node_idle_w, rules).values())


def may_issue(records: Mapping[str, GrantRecord], job: str, watts: float | None, node: str,
              pods: Iterable[PodLimit], node_idle_w: Mapping[str, float], cap_w: float,
              rules: Rules = ALL_RULES) -> bool:
    """Whether issuing `watts` to `job` on `node` keeps the authorised sum within the cap. A
    lowered or withdrawn grant always may: what the job held still counts until its echo."""
    current = records.get(job, GrantRecord(job, node))
    if watts is None or (current.watts is not None and current.node == node
                         and watts <= current.watts + EPS_W):
        return True
    trial = {**records, job: issue(current, watts, current.sequence + 1, node, current.purpose,
                                   rules)}
    return authorised_w(trial.values(), pods, node_idle_w, rules) <= cap_w + EPS_W


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)
