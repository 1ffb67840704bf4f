"""A PowerBudget's reconcile as a pure function: `decide_budget(...) → (status, grants, events)`.

The jobs are the site's jobs that asked for a share (`status.powerShare`): for a training plan,
or for the ceiling of a profiling sweep. The allocator (`planner/budget.py`) splits the cap now
(the schedule applied) among the training jobs; profiling takes what they leave. Grants are
issued through `grants.py`: recorded with a sequence number in the budget's status (the record),
then notified as an annotation on each job, which plans under a grant and echoes its sequence.
Lowered grants are issued at once; a raise or a new grant only when the site's authorised draw
(every grant a job may still act on, every pod that has not ended) stays within the cap with it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from edgetrain.api.budget import (
    BudgetAllocationStatus,
    GrantPurpose,
    LabelSelector,
    PowerBudgetSpec,
    PowerBudgetStatus,
    allocation_annotation,
    parse_allocation,
)
from edgetrain.api.job_status import Condition, Phase
from edgetrain.api.keys import LABEL_DEVICE_MODEL
from edgetrain.kube import now_rfc3339
from edgetrain.operator.grants import (
    ALL_RULES,
    GrantRecord,
    PodLimit,
    Rules,
    acknowledge,
    authorised_w,
    issue,
    may_issue,
)
from edgetrain.operator.phases import NodeInfo
from edgetrain.planner.budget import (
    EPS_W,
    BudgetObjective,
    JobOptions,
    SitePlan,
    allocate,
    site_draw_w,
)

# A profiling sweep is granted only a ceiling at least this far above its node's idle draw:
# below it no point of any workload would be measured.
PROFILE_HEADROOM_W = 1.0


@dataclass(frozen=True)
class BudgetJob:
    """What the budget sees of one job that asked for a share."""

    namespace: str
    name: str
    phase: Phase
    node: str  # where it trains, or where it asked for power
    own_limit_w: float
    created: str  # creationTimestamp: arrival order
    annotation: str | None  # the job's allocation annotation as it stands
    acknowledged: int = 0  # the grant sequence its status echoes
    purpose: GrantPurpose = "train"
    options: JobOptions | None = None  # None: its profile or efficiency is unreadable
    device_model: str = ""

    @property
    def key(self) -> str:
        """namespace/name."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class GrantWrite:
    """Set a job's allocation annotation to `text`."""

    namespace: str
    name: str
    text: str


@dataclass
class BudgetDecision:
    """The budget's new status, the annotations to write, and Events (type, reason, message)."""

    status: PowerBudgetStatus
    writes: list[GrantWrite] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)


def job_node(budget: str, share_node: str, annotation: str | None,
             training_node: str | None) -> str:
    """Where a job draws its share: the node it trains on, else the node its grant names, else
    the node it asked on."""
    if training_node:
        return training_node
    notice = parse_allocation(annotation)
    if notice is not None and notice.budget == budget and notice.watts is not None \
            and notice.node:
        return notice.node
    return share_node


def assign_nodes(here: Sequence[BudgetJob], holding: Mapping[str, bool],
                 site: Sequence[NodeInfo]) -> tuple[list[BudgetJob], dict[str, str]]:
    """One job per node: jobs holding a share keep theirs; the others, in arrival order, get
    the node they asked on if it is free, else the first free node of their device model.
    Returns the jobs with their nodes, and why a job got none."""
    taken = {j.node for j in here if holding.get(j.key)}
    out: list[BudgetJob] = []
    none: dict[str, str] = {}
    for j in sorted(here, key=lambda j: (not holding.get(j.key), _order(j.created), j.key)):
        if holding.get(j.key):
            out.append(j)
            continue
        free = [n.name for n in site if n.name not in taken and n.schedulable
                and (not j.device_model
                     or n.label_map.get(LABEL_DEVICE_MODEL) == j.device_model)]
        node = j.node if j.node in free else (free[0] if free else "")
        if node:
            taken.add(node)
            out.append(replace(j, node=node))
        else:
            out.append(j)
            none[j.key] = "every node of its device model on the site runs a job"
    return out, none


def records_of(status: PowerBudgetStatus) -> dict[str, GrantRecord]:
    """The grant records kept in the budget's status, by job."""
    return {f"{a.namespace}/{a.name}": GrantRecord(
        job=f"{a.namespace}/{a.name}", node=a.node, watts=a.watts, sequence=a.sequence,
        acknowledged=a.acknowledged, held_w=a.held_watts, purpose=a.purpose)
        for a in status.allocations}


def problems(name: str, site: Sequence[NodeInfo], cap_w: float, idle_w: float,
             others: Mapping[str, LabelSelector]) -> list[tuple[str, str]]:
    """What needs several objects to see: (reason, message) per problem."""
    out: list[tuple[str, str]] = []
    for node in site:
        shared = sorted(b for b, sel in others.items() if b != name and sel.matches(node.label_map))
        if shared:
            out.append(("OverlappingBudgets",
                        f"node {node.name} is also under PowerBudget {', '.join(shared)}; a node"
                        " may belong to one budget only: narrow the nodeSelectors"))
            break
    if site and cap_w < idle_w - EPS_W:
        out.append(("CapBelowIdle",
                    f"the cap {cap_w:g} W is below the idle draw of the site's {len(site)}"
                    f" node(s), {idle_w:.2f} W; raise capWatts (or the schedule step) or select"
                    " fewer nodes"))
    if not site:
        out.append(("NoNodes", "the nodeSelector matches no Jetson node"))
    return out


def decide_budget(
    name: str,
    spec: PowerBudgetSpec,
    previous: PowerBudgetStatus,
    *,
    generation: int | None,
    seconds_of_day: float,
    nodes: Sequence[NodeInfo],
    node_idle_w: Mapping[str, float],
    others: Mapping[str, LabelSelector],
    jobs: Sequence[BudgetJob],
    pods: Sequence[PodLimit] = (),
    gone: Collection[str] = (),
    rules: Rules = ALL_RULES,
) -> BudgetDecision:
    """One step of the budget (see the module docstring). `pods`: the site's worker pods that
    have not ended, read after `jobs` (an echo seen is never newer than the pods seen).
    `gone`: jobs with a record that no longer exist (a job missing from `jobs` but not gone may
    still plan under a grant notified to it: its record stays, and counts)."""
    site = [n for n in nodes if spec.node_selector.matches(n.label_map)]
    idle = {n.name: node_idle_w.get(n.name, 0.0) for n in site}
    cap = spec.cap_at(seconds_of_day)
    here = [j for j in jobs if j.node in idle and not j.phase.final]
    ended = set(gone) | {j.key for j in jobs if j.phase.final}
    known = records_of(previous)
    # A job that ended acts on nothing more (its pods still count); one the index does not
    # show now keeps what it holds.
    records = {k: r for k, r in known.items() if k not in ended and r.held_w is not None}
    for j in here:
        rec = known.get(j.key, GrantRecord(j.key, j.node, purpose=j.purpose))
        records[j.key] = acknowledge(rec, j.acknowledged, rules)
    # A job that may still act on a grant keeps that grant's node.
    holding = {k: r.held_w is not None or r.watts is not None for k, r in records.items()}
    here = [replace(j, node=records[j.key].node) if holding[j.key] and records[j.key].node
            else j for j in here]
    here, no_node = assign_nodes(here, holding, site)
    current = {j.key: records[j.key].watts for j in here}
    status = PowerBudgetStatus(cap_watts=cap, nodes=sorted(idle), observed_generation=generation)
    out = BudgetDecision(status)
    trouble = problems(name, site, cap, sum(idle.values()), others)
    reasons: dict[str, str] = dict(no_node)
    plan: SitePlan | None = None
    if trouble:
        target = dict(current)  # nothing new is planned under a budget with a problem
        for j in here:
            if current[j.key] is None:
                reasons[j.key] = f"PowerBudget {name}: {trouble[0][1]}"
    else:
        target, plan = _targets(here, current, no_node, reasons, cap, idle, spec.objective,
                                rules)
    seq = previous.sequence
    waits: list[str] = []
    # Lowered and withdrawn grants first, then raises and new grants in arrival order: each
    # raise is issued only if the authorised sum still fits with it.
    for j in sorted(here, key=lambda j: (not _lowers(current[j.key], target.get(j.key)),
                                         current[j.key] is None, _order(j.created), j.key)):
        want, rec = target.get(j.key), records[j.key]
        purpose: GrantPurpose = j.purpose
        if want == rec.watts and (want is None or (rec.node == j.node
                                                   and rec.purpose == purpose)):
            continue
        if not may_issue(records, j.key, want, j.node, pods, idle, cap, rules):
            waits.append(j.key)
            reasons.setdefault(j.key, "")
            continue
        seq += 1
        records[j.key] = issue(rec, want, seq, j.node, purpose, rules)
    for j in here:
        rec = records[j.key]
        reason = reasons.get(j.key, "") if rec.watts is None else ""
        if j.key in waits and rec.watts is None:
            reason = "the site's draw would exceed the cap until others have lowered theirs"
        text = allocation_annotation(name, rec.watts, reason, node=rec.node,
                                     sequence=rec.sequence, purpose=rec.purpose)
        if text != j.annotation and (rec.sequence or reason):
            out.writes.append(GrantWrite(j.namespace, j.name, text))
    grants = {k: r.watts for k, r in records.items()}
    node_of = {**{k: r.node for k, r in records.items()}, **{j.key: j.node for j in here}}
    status.sequence = seq
    status.planned_watts = round(site_draw_w(grants, node_of, idle), 3)
    status.authorised_watts = round(authorised_w(records.values(), pods, idle, rules), 3)
    status.profiling_watts = round(sum(r.watts or 0.0 for r in records.values()
                                       if r.purpose == "profile"), 3)
    busy = {node_of[k] for k, w in grants.items() if w is not None}
    status.idle_watts = round(sum(w for n, w in idle.items() if n not in busy), 3)
    status.jobs = sum(1 for w in grants.values() if w is not None)
    status.waiting = len(here) - status.jobs
    if waits:
        status.message = ("raises wait until the jobs lowered have echoed their grants and"
                          " their older pods have ended: " + ", ".join(sorted(waits)))
    allocs = plan.by_job() if plan is not None else {}
    for key in sorted(records.keys() - {j.key for j in here}):
        rec = records[key]
        namespace, _, job_name = key.partition("/")
        status.allocations.append(BudgetAllocationStatus(
            namespace=namespace, name=job_name, node=rec.node, watts=rec.watts,
            purpose=rec.purpose, sequence=rec.sequence, acknowledged=rec.acknowledged,
            held_watts=rec.held_w, message="not asking now; what it holds still counts"))
    for j in here:
        rec, share = records[j.key], allocs.get(j.key)
        label = (j.options.labels[share.point] if j.options is not None and share is not None
                 and share.point is not None and j.options.labels and rec.watts is not None
                 and rec.purpose == "train" else None)
        status.allocations.append(BudgetAllocationStatus(
            namespace=j.namespace, name=j.name, node=rec.node or j.node, watts=rec.watts,
            purpose=rec.purpose, sequence=rec.sequence, acknowledged=rec.acknowledged,
            held_watts=rec.held_w,
            batch_size=label[0] if label else None,
            gpu_frequency_hz=label[1] if label else None,
            predicted_seconds=share.seconds if label and share is not None else None,
            message=_message(j.key, rec, target.get(j.key), reasons)))
    _conditions(out, previous, trouble)
    if out.writes:
        summary = ", ".join(f"{k}={'wait' if w is None else f'{w:.2f} W'}"
                            for k, w in sorted(grants.items()))
        out.events.append(("Normal", "Allocated",
                           f"cap {cap:g} W, authorised {status.authorised_watts:g} W:"
                           f" {summary}"))
    return out


def _targets(here: Sequence[BudgetJob], current: Mapping[str, float | None],
             no_node: Mapping[str, str], reasons: dict[str, str], cap: float,
             idle: Mapping[str, float], objective: BudgetObjective, rules: Rules,
             ) -> tuple[dict[str, float | None], SitePlan]:
    """The grants the site should have now: the allocator's split of what profiling sweeps
    hold among the training jobs, then new sweeps in arrival order from what is left."""
    profilers = sorted((j for j in here if j.purpose == "profile" and j.key not in no_node),
                       key=lambda j: (current[j.key] is None, _order(j.created), j.key))
    opts = []
    for j in here:
        if j.key in no_node or j.purpose == "profile":
            continue
        if j.options is None:
            reasons[j.key] = "its profile or efficiency vector is not readable yet"
            continue
        o = j.options
        opts.append(JobOptions(j.key, o.power_w, o.seconds, limit_w=j.own_limit_w,
                               node=j.node, running=current[j.key] is not None,
                               order=_order(j.created), labels=o.labels))
    opts.sort(key=lambda o: o.name)  # the same jobs give the same split, whatever changed
    # Sweeps under way keep their ceilings while the running plans' cheapest points still fit.
    floor = site_draw_w({o.name: o.min_power_w for o in opts if o.running},
                        {o.name: o.node for o in opts}, idle)
    kept: dict[str, float] = {}
    for j in profilers:
        held = current[j.key]
        if held is not None and floor - idle[j.node] + held <= cap + EPS_W:
            kept[j.key] = held
            floor += held - idle[j.node]
    swept = {j.node for j in profilers if j.key in kept}
    rest = {n: w for n, w in idle.items() if n not in swept}
    plan = allocate(opts, max(cap - sum(kept.values()), EPS_W), rest, objective=objective,
                    prefer=current if rules.current_grants_win_ties else None)
    target: dict[str, float | None] = {**{k: None for k in reasons}, **plan.grants(), **kept}
    if _not_worth_it(opts, current, plan, cap - sum(kept.values()), rest, objective):
        target = {**target, **{o.name: current[o.name] for o in opts}}
    for a in plan.allocations:
        if a.waiting:
            reasons[a.job] = a.reason
    node_of = {j.key: j.node for j in here}
    planned = site_draw_w(target, node_of, idle)
    for j in profilers:
        if j.key in kept:
            continue
        need = sweep_ceiling_w(j.own_limit_w, cap, idle, j.node)
        room = cap - planned + idle[j.node]
        if need >= idle[j.node] + PROFILE_HEADROOM_W - EPS_W and room >= need - EPS_W:
            target[j.key] = need
            planned = site_draw_w(target, node_of, idle)
        else:
            target[j.key] = None
            reasons[j.key] = (f"its profiling sweep needs a {need:.2f} W ceiling on {j.node};"
                              f" the cap is {cap:g} W and {planned:.2f} W is planned without"
                              " it")
    return target, plan


def sweep_ceiling_w(own_limit_w: float, cap_w: float, idle: Mapping[str, float],
                    node: str) -> float:
    """A profiling sweep's ceiling: the job's own limit, or what the site could give one node
    at most (the cap less the other nodes' idle draw), whichever is lower. A sweep waits for
    the whole of it: a lower ceiling would cut the profile below what the job may be granted."""
    others = sum(w for n, w in idle.items() if n != node)
    return round(min(own_limit_w, cap_w - others), 3)


def _lowers(current: float | None, target: float | None) -> bool:
    return current is not None and (target is None or target < current - EPS_W)


def _message(key: str, rec: GrantRecord, target: float | None,
             reasons: Mapping[str, str]) -> str:
    if rec.watts is None:
        return reasons.get(key, "")
    if target is not None and target > rec.watts + EPS_W:
        return f"gets {target:.2f} W once the other jobs have lowered their plans"
    if rec.acknowledged < rec.sequence:
        return f"grant {rec.sequence} issued, not yet acknowledged"
    return ""


#: A new split of the same running jobs must beat the current one by this much: every change
#: stops a training Job and resumes it from its checkpoint.
REPLAN_GAIN = 0.02


def _not_worth_it(opts: Sequence[JobOptions], current: Mapping[str, float | None],
                  plan: SitePlan, cap: float, idle: Mapping[str, float],
                  objective: str) -> bool:
    """The plan runs the same jobs as now, the current grants fit the cap, and the plan is
    less than REPLAN_GAIN better than what the jobs can do within their current grants."""
    granted = {o.name for o in opts if current.get(o.name) is not None}
    if granted != {a.job for a in plan.allocations if not a.waiting}:
        return False
    if site_draw_w(current, {o.name: o.node for o in opts}, idle) > cap + EPS_W:
        return False
    now: list[float] = []
    for o in opts:
        if o.name not in granted:
            continue
        ok = o.eligible[o.power_w[o.eligible] <= (current[o.name] or 0.0) + EPS_W]
        if ok.size == 0:
            return False
        now.append(float(o.seconds[ok].min()))
    mine = plan.makespan_seconds if objective == "makespan" else plan.sum_seconds
    theirs = max(now, default=0.0) if objective == "makespan" else sum(now)
    return mine >= theirs * (1 - REPLAN_GAIN)


def _order(created: str) -> float:
    """Arrival order from an RFC 3339 timestamp (its digits sort as time does)."""
    digits = "".join(c for c in created if c.isdigit())
    return float(digits) if digits else math.inf


def _conditions(out: BudgetDecision, previous: PowerBudgetStatus,
                trouble: Sequence[tuple[str, str]]) -> None:
    was = next((c for c in previous.conditions if c.type == "Ready"), None)
    if trouble:
        reason, message = trouble[0]
        cond = Condition(type="Ready", status="False", reason=reason, message=message)
        out.status.message = message
    else:
        cond = Condition(type="Ready", status="True", reason="Allocated",
                         message="jobs share the cap")
    same = was is not None and (was.status, was.reason, was.message) == (
        cond.status, cond.reason, cond.message)
    cond.last_transition_time = was.last_transition_time if same and was else now_rfc3339()
    out.status.conditions = [cond]
    if trouble and not same:
        out.events.append(("Warning", trouble[0][0],
                           f"{trouble[0][1]}; nothing new is planned under this budget"))
