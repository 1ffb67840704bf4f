"""A PowerBudget's reconcile as a pure function: `decide_budget(...) → (status, grants, events)`.

The jobs are the site's jobs that asked for a share (`status.powerShare`); the allocator
(`planner/budget.py`) splits the cap now (the schedule applied) among them. Grants are written as
an annotation on each job, which re-plans through the limit-change path. Changes land in the
allocator's stages: lowered grants at once; raised and new grants only once every job runs a
plan within its grant, and only if the site's committed draw then stays within the cap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from edgetrain.api.budget import (
    BudgetAllocationStatus,
    LabelSelector,
    PowerBudgetSpec,
    PowerBudgetStatus,
    allocation_annotation,
    allocation_node,
    parse_allocation,
)
from edgetrain.api.job_status import Condition, Phase
from edgetrain.api.keys import LABEL_DEVICE_MODEL
from edgetrain.kube import now_rfc3339
from edgetrain.operator.phases import NodeInfo
from edgetrain.planner.budget import (
    EPS_W,
    JobOptions,
    SitePlan,
    allocate,
    site_draw_w,
    transition_steps,
)


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
    # While it trains: the limit its running plan was made for, and that plan's draw.
    running_limit_w: float | None = None
    running_power_w: float | None = None
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


def _grant(job: BudgetJob, budget: str) -> float | None:
    share = parse_allocation(job.annotation)
    return share[1] if share is not None and share[0] == budget else None


def job_node(budget: str, share_node: str, annotation: str | None,
             training_node: str | None) -> str:
    """Where a job draws its share: the node it trains on, else the node its grant names, else
    the node it asked on."""
    if training_node:
        return training_node
    granted = allocation_node(annotation)
    if granted and _grant_of(annotation, budget) is not None:
        return granted
    return share_node


def _grant_of(annotation: str | None, budget: str) -> float | None:
    share = parse_allocation(annotation)
    return share[1] if share is not None and share[0] == budget else None


def assign_nodes(here: Sequence[BudgetJob], current: Mapping[str, float | None],
                 site: Sequence[NodeInfo]) -> tuple[list[BudgetJob], dict[str, str]]:
    """One job per node: jobs holding a share keep theirs; the others, in arrival order, get
    the node they asked on if it is free, else the first free node of their device model.
    Returns the jobs with their nodes, and why a job got none."""
    taken = {j.node for j in here if current.get(j.key) is not None}
    out: list[BudgetJob] = []
    none: dict[str, str] = {}
    for j in sorted(here, key=lambda j: (current.get(j.key) is None, _order(j.created), j.key)):
        if current.get(j.key) is not None:
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


def committed_w(job: BudgetJob, grant: float | None) -> float | None:
    """What the job may draw now: its grant, or its running plan's draw while that plan was
    made for a higher limit than the grant (it has not re-planned yet)."""
    if (job.phase is Phase.training and job.running_limit_w is not None
            and job.running_power_w is not None
            and (grant is None or job.running_limit_w > grant + EPS_W)):
        return max(job.running_power_w, grant or 0.0)
    return grant


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
) -> BudgetDecision:
    """One step of the budget (see the module docstring)."""
    site = [n for n in nodes if spec.node_selector.matches(n.label_map)]
    idle = {n.name: node_idle_w.get(n.name, 0.0) for n in site}
    cap = spec.cap_at(seconds_of_day)
    here = [j for j in jobs if j.node in idle and not j.phase.final]
    current = {j.key: _grant(j, name) for j in here}
    here, no_node = assign_nodes(here, current, site)
    node_of = {j.key: j.node for j in here}
    status = PowerBudgetStatus(cap_watts=cap, nodes=sorted(idle), observed_generation=generation)
    out = BudgetDecision(status)
    trouble = problems(name, site, cap, sum(idle.values()), others)
    texts = {j.key: j.annotation for j in here}
    reasons: dict[str, str] = dict(no_node)
    plan: SitePlan | None = None
    if trouble:
        target = dict(current)  # nothing new is planned under a budget with a problem
        for j in here:
            if current[j.key] is None:
                reasons[j.key] = f"PowerBudget {name}: {trouble[0][1]}"
    else:
        opts = []
        for j in here:
            if j.key in no_node:
                continue
            if j.options is None:
                reasons[j.key] = "its profile or efficiency vector is not readable yet"
                continue
            o = j.options
            opts.append(JobOptions(j.key, o.power_w, o.seconds, limit_w=j.own_limit_w,
                                   node=j.node, running=current[j.key] is not None,
                                   order=_order(j.created), labels=o.labels))
        opts.sort(key=lambda o: o.name)  # the same jobs give the same split, whatever changed
        plan = allocate(opts, cap, idle, objective=spec.objective)
        target = {**{k: None for k in reasons}, **plan.grants()}
        if _not_worth_it(opts, current, plan, cap, idle, spec.objective):
            target = {**target, **{o.name: current[o.name] for o in opts}}
        for a in plan.allocations:
            if a.waiting:
                reasons[a.job] = a.reason
    grants, why = next_grants(here, current, target, cap, idle)
    if why:
        out.status.message = why
    for j in here:
        text = allocation_annotation(name, grants[j.key],
                                     reasons.get(j.key, "") if grants[j.key] is None else "",
                                     node=j.node)
        if text != texts[j.key]:
            out.writes.append(GrantWrite(j.namespace, j.name, text))
    by_key = {j.key: j for j in here}
    committed = {k: committed_w(by_key[k], w) for k, w in grants.items()}
    status.idle_watts = round(sum(w for n, w in idle.items()
                                  if n not in {node_of[k] for k, v in committed.items()
                                               if v is not None}), 3)
    status.planned_watts = round(site_draw_w(committed, node_of, idle), 3)
    status.jobs = sum(1 for w in grants.values() if w is not None)
    status.waiting = len(here) - status.jobs
    allocs = plan.by_job() if plan is not None else {}
    for j in here:
        share = allocs.get(j.key)
        label = (j.options.labels[share.point] if j.options is not None and share is not None
                 and share.point is not None and j.options.labels else None)
        status.allocations.append(BudgetAllocationStatus(
            namespace=j.namespace, name=j.name, node=j.node, watts=grants[j.key],
            batch_size=label[0] if label and grants[j.key] is not None else None,
            gpu_frequency_hz=label[1] if label and grants[j.key] is not None else None,
            predicted_seconds=(share.seconds if share is not None and grants[j.key] is not None
                               else None),
            message=reasons.get(j.key, "") if grants[j.key] is None else _pending(
                j, grants[j.key], target.get(j.key))))
    _conditions(out, previous, trouble)
    if out.writes:
        summary = ", ".join(f"{k}={'wait' if w is None else f'{w:.2f} W'}"
                            for k, w in sorted(grants.items()))
        out.events.append(("Normal", "Allocated",
                           f"cap {cap:g} W, planned {status.planned_watts:g} W: {summary}"))
    return out


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


def _pending(job: BudgetJob, grant: float | None, target: float | None) -> str:
    if target is not None and grant is not None and target > grant + EPS_W:
        return f"gets {target:.2f} W once the other jobs have lowered their plans"
    return ""


def next_grants(here: Sequence[BudgetJob], current: Mapping[str, float | None],
                target: Mapping[str, float | None], cap: float, idle: Mapping[str, float],
                ) -> tuple[dict[str, float | None], str]:
    """The grants to write now, and why some change waits: the lowering stage lands at once;
    the raising stage only when every job runs within its grant and the site's draw with
    every raise stays within the cap."""
    grants = dict(current)
    stages = transition_steps(current, target)
    if not stages:
        return grants, ""
    first = stages[0]
    if _lowering(first, current):
        grants.update(first)
        return grants, ("" if len(stages) == 1 else
                        "lowering jobs first; the others get more once those have re-planned")
    if not all(committed_w(j, current.get(j.key)) == current.get(j.key) for j in here):
        return grants, "waiting for jobs to re-plan within their lowered grants"
    trial = {**grants, **dict(first)}
    if site_draw_w(trial, {j.key: j.node for j in here}, idle) > cap + EPS_W:
        return grants, "the raised grants would not fit the cap"
    return trial, ""


def _lowering(stage: Sequence[tuple[str, float | None]],
              current: Mapping[str, float | None]) -> bool:
    return all(w is None or (current.get(k) is not None and w < (current.get(k) or 0.0))
               for k, w in stage)


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
