"""Pure decision functions of the phase machine (no API calls; unit-tested without a cluster)."""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.api.job_status import (
    CandidateStatus,
    Condition,
    Phase,
    PlanPointStatus,
    PowerAwareTrainingJobStatus,
    ProfileStatus,
    SelectionStatus,
    TrainingStatus,
)
from edgetrain.api.keys import GPU_RESOURCE, LABEL_DEVICE_MODEL, LABEL_L4T
from edgetrain.api.plan import Objective, PlanResult
from edgetrain.api.profile import ProfilePoint
from edgetrain.api.training import TrainingEvent
from edgetrain.kube import Obj, node_schedulable, now_rfc3339
from edgetrain.pipeline.validate import job_problems
from edgetrain.planner import Lut
from edgetrain.planner import plan as make_plan
from edgetrain.planner.plan import InfeasibleError, PlanInputError

EXIT_BAD_INPUT = 2
EXIT_BUDGET = 4


def _count(quantity: object) -> int:
    """A whole-number resource quantity (GPUs are counted in units); 0 if it is not one."""
    try:
        return max(0, int(str(quantity)))
    except ValueError:
        return 0


# --- nodes -------------------------------------------------------------------------------


def matches(labels: dict[str, str], selector: dict[str, str]) -> bool:
    """Equality-based label selection."""
    return all(labels.get(k) == v for k, v in selector.items())


@dataclass(frozen=True)
class NodeInfo:
    """What the operator needs of a Node: its name, labels, and whether pods may land on it."""

    name: str
    labels: tuple[tuple[str, str], ...]
    schedulable: bool
    allocatable_gpus: int = 0  # nvidia.com/gpu (a GPU server's device plugin)

    @classmethod
    def of(cls, node: Obj) -> NodeInfo:
        """From a Node object (the nodes index keeps only this)."""
        labels = node["metadata"].get("labels") or {}
        gpus = ((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, "0")
        return cls(str(node["metadata"]["name"]), tuple(sorted(labels.items())),
                   node_schedulable(node), _count(gpus))

    @functools.cached_property
    def label_map(self) -> dict[str, str]:
        """The labels as a dict (built once: every profiling reconcile reads it for each node
        of the fleet)."""
        return dict(self.labels)


@dataclass(frozen=True)
class Candidate:
    """A device model among the nodes the job may run on, and its nodes (Ready, by name)."""

    device_model: str
    l4t: str | None
    nodes: tuple[str, ...]


# (id of a nodes sequence, selector, exclude) → (that sequence, its candidates). The reconciler
# hands every reconcile of a burst the same fleet snapshot (`Reconciler.fleet`), so grouping a
# fleet of thousands of nodes is done once per snapshot and selector, not once per job.
_MEMO: OrderedDict[tuple[int, tuple[tuple[str, str], ...], frozenset[str]],
                   tuple[Sequence[NodeInfo], tuple[Candidate, ...]]] = OrderedDict()
_MEMO_SIZE = 64
_memo_lock = threading.Lock()


def candidates(
    nodes: Sequence[NodeInfo], selector: dict[str, str], exclude: frozenset[str] = frozenset()
) -> list[Candidate]:
    """Group the Ready nodes matching `selector` by device model (sorted, deterministic)."""
    key = (id(nodes), tuple(sorted(selector.items())), exclude)
    with _memo_lock:
        hit = _MEMO.get(key)
        if hit is not None and hit[0] is nodes:  # `is`: an id may be reused once freed
            return list(hit[1])
    found = _group(nodes, selector, exclude)
    with _memo_lock:
        _MEMO[key] = (nodes, tuple(found))
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    return found


def _group(
    nodes: Sequence[NodeInfo], selector: dict[str, str], exclude: frozenset[str]
) -> list[Candidate]:
    groups: dict[str, list[NodeInfo]] = {}
    for node in nodes:
        labels = node.label_map
        if node.name in exclude or not node.schedulable:
            continue
        if not matches(labels, selector) or LABEL_DEVICE_MODEL not in labels:
            continue
        groups.setdefault(labels[LABEL_DEVICE_MODEL], []).append(node)
    out = []
    for model in sorted(groups):
        members = sorted(groups[model], key=lambda n: n.name)
        l4t = members[0].label_map.get(LABEL_L4T)
        out.append(Candidate(model, l4t, tuple(n.name for n in members)))
    return out


def least_loaded(nodes: tuple[str, ...], load: dict[str, int]) -> str:
    """The node running the fewest training pods (ties: by name)."""
    return min(nodes, key=lambda n: (load.get(n, 0), n))


def place(
    ranked: list[str], groups: dict[str, tuple[str, ...]], load: dict[str, int]
) -> tuple[str, str]:
    """(device model, node): the best-ranked model with an idle node, else the best model's
    least-loaded node. One Jetson trains one job at a time when the fleet allows it."""
    for model in ranked:
        idle = [n for n in groups[model] if load.get(n, 0) == 0]
        if idle:
            return model, idle[0]
    return ranked[0], least_loaded(groups[ranked[0]], load)


# --- Jobs and pods ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What became of a Job: running, succeeded, or failed with an exit code and a message."""

    state: str  # "running" | "succeeded" | "failed"
    exit_code: int | None = None
    reason: str = ""
    message: str = ""


def _terminated(pod: Obj) -> Obj | None:
    for cs in pod.get("status", {}).get("containerStatuses", []) or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            return dict(term)
        last = (cs.get("lastState") or {}).get("terminated")
        if last:
            return dict(last)
    return None


def _exit_code(pod: Obj) -> int | None:
    term = _terminated(pod)
    return None if term is None else int(term.get("exitCode", 1))


def job_complete(job: Obj) -> bool:
    """Every completion of the Job succeeded (an Indexed estimate Job has several)."""
    status = job.get("status", {}) or {}
    if any(c.get("type") == "Complete" and c.get("status") == "True"
           for c in status.get("conditions", []) or []):
        return True
    completions = (job.get("spec") or {}).get("completions") or 1
    return int(status.get("succeeded") or 0) >= int(completions)


def job_finished(job: Obj) -> bool:
    """Complete, or failed (backoffLimit 0: the first failed pod fails the Job)."""
    status = job.get("status", {}) or {}
    return job_complete(job) or bool(status.get("failed")) or any(
        c.get("type") == "Failed" and c.get("status") == "True"
        for c in status.get("conditions", []) or [])


def job_outcome(job: Obj, pods: list[Obj]) -> Outcome:
    """Classify a Job (backoffLimit 0) from its conditions and its pods' termination states."""
    status = job.get("status", {}) or {}
    conds = {c.get("type"): c for c in status.get("conditions", []) or []
             if c.get("status") == "True"}
    if job_complete(job):
        return Outcome("succeeded", 0)
    if "Failed" in conds or status.get("failed"):
        # The first pod that failed: an Indexed Job's pods that succeeded before it say nothing.
        for pod in sorted(pods, key=lambda p: (_exit_code(p) == 0,
                                               p["metadata"].get("creationTimestamp", ""))):
            term = _terminated(pod)
            if term:
                return Outcome(
                    "failed",
                    int(term.get("exitCode", 1)),
                    str(term.get("reason", "Error")),
                    str(term.get("message", "")).strip()[-1500:],
                )
        cond = conds.get("Failed", {})
        return Outcome("failed", None, str(cond.get("reason", "Failed")),
                       str(cond.get("message", "")))
    return Outcome("running")


def daemonset_failures(pods: list[Obj]) -> tuple[int, str]:
    """Failed runs of a profiling DaemonSet's pods (restarts), and the newest failure message."""
    failures, message = 0, ""
    for pod in pods:
        for cs in pod.get("status", {}).get("containerStatuses", []) or []:
            failures += int(cs.get("restartCount", 0))
            for state in (cs.get("state") or {}, cs.get("lastState") or {}):
                term = state.get("terminated")
                if term and int(term.get("exitCode", 0)) != 0:
                    message = f"exit code {term.get('exitCode')}: {term.get('message', '')}".strip()
    return failures, message[-1500:]


def backoff_s(base_s: float, failures: int) -> float:
    """Delay before retry number `failures` (1, 2, …): base × 2^(failures-1), at most 10 min."""
    return float(min(600.0, base_s * 2.0 ** max(0, failures - 1)))


# --- input -----------------------------------------------------------------------------------


def bad_input(spec: PowerAwareTrainingJobSpec, where: str) -> str | None:
    """The first problem of a job's spec that needs no training (None if none): what
    `edgetrain run` reports before any work, minus the checks of a standalone run."""
    problems = job_problems(spec, where, standalone=False)
    if not problems:
        return None
    more = len(problems) - 1
    return str(problems[0]) + (f" (+{more} more)" if more else "")


# --- selection -------------------------------------------------------------------------------


def no_worker_identity(namespace: str, service_account: str) -> str:
    """Why a job cannot start in a namespace the chart did not enable, and how to enable it."""
    return (
        f"namespace {namespace} has no ServiceAccount {service_account!r} for edgetrain's "
        f"worker pods (the operator creates no RBAC): add {namespace} to the chart's "
        f"worker.namespaces, or label it to match worker.namespaceSelector, then run "
        f"`helm upgrade <release> charts/edgetrain --reuse-values --set "
        f"'worker.namespaces={{...,{namespace}}}'` and re-create this job")


def objective_value(plan: PlanResult, objective: Objective) -> float:
    """What the selection compares across device models."""
    return float(plan.relative_energy_j if objective is Objective.energy else plan.relative_time)


def plan_candidates(
    spec: PowerAwareTrainingJobSpec,
    efficiency: EfficiencyVector,
    profiles: dict[str, list[ProfilePoint]],
) -> tuple[str | None, PlanResult | None, list[CandidateStatus]]:
    """Plan on every device model; the best (model, plan) by the objective, and all of them."""
    best: tuple[float, str, PlanResult] | None = None
    rows: list[CandidateStatus] = []
    for model in sorted(profiles):
        try:
            result = make_plan(
                Lut.from_points(profiles[model]),
                efficiency,
                spec.power_limit_w,
                metric=spec.strategy.power_metric,
                objective=spec.strategy.objective,
            )
        except (InfeasibleError, PlanInputError, ValueError) as exc:
            rows.append(CandidateStatus(device_model=model, error=str(exc)))
            continue
        value = objective_value(result, spec.strategy.objective)
        rows.append(
            CandidateStatus(
                device_model=model,
                batch_size=result.batch_size,
                gpu_frequency_hz=result.gpu_freq_hz,
                predicted_seconds=result.predicted_seconds,
                objective_value=value,
            )
        )
        if best is None or value < best[0]:
            best = (value, model, result)
    if best is None:
        return None, None, rows
    return best[1], best[2], rows


def plan_for(
    spec: PowerAwareTrainingJobSpec, efficiency: EfficiencyVector, points: list[ProfilePoint]
) -> PlanResult:
    """The plan on one device model's profile."""
    return make_plan(Lut.from_points(points), efficiency, spec.power_limit_w,
                     metric=spec.strategy.power_metric, objective=spec.strategy.objective)


def power_mode(sel: SelectionStatus) -> tuple[int, int, int] | None:
    """(CPU cores, CPU Hz, EMC Hz) of a plan over full power modes; None for GPU-only plans."""
    if sel.cpu_cores and sel.cpu_frequency_hz and sel.emc_frequency_hz:
        return (sel.cpu_cores, sel.cpu_frequency_hz, sel.emc_frequency_hz)
    return None


def baselines(plan: PlanResult) -> dict[str, PlanPointStatus]:
    """B1, B2 (and the oracle, if any) as status fields."""
    return {
        name: PlanPointStatus(
            batch_size=b.batch_size,
            gpu_frequency_hz=b.gpu_freq_hz,
            power_watts=b.power_w,
            predicted_seconds=b.predicted_seconds,
            relative_time=b.relative_time,
            ratio_to_plan=b.ratio_to_plan,
        )
        for name, b in plan.baselines.items()
    }


def sweep_spec(spec: PowerAwareTrainingJobSpec, status: PowerAwareTrainingJobStatus,
               device_model: str) -> PowerAwareTrainingJobSpec:
    """The spec a sweep of `device_model` runs under: a site budget's profiling grant below the
    job's own limit is its ceiling (the frontier is cut there, and the cache key says so)."""
    share = status.power_share
    if (share is None or share.purpose != "profile" or share.watts is None
            or share.device_model != device_model or share.watts >= spec.power_limit_w):
        return spec
    return spec.model_copy(update={"power_limit_watts": share.watts})


def profiles_cover_limit(profiles: list[ProfileStatus], limit_w: float) -> bool:
    """Every profile was measured up to at least `limit_w` (a frontier cut lower misses points)."""
    for prof in profiles:
        cut = math.inf if prof.power_limit_watts is None else prof.power_limit_watts
        if limit_w > cut:
            return False
    return bool(profiles)


# --- status helpers --------------------------------------------------------------------------


def set_condition(
    status: PowerAwareTrainingJobStatus, kind: str, value: bool, reason: str, message: str
) -> None:
    """Add or update a condition; lastTransitionTime changes only when the status flips."""
    text = "True" if value else "False"
    for cond in status.conditions:
        if cond.type == kind:
            if cond.status != text:
                cond.last_transition_time = now_rfc3339()
            cond.status, cond.reason, cond.message = text, reason, message
            return
    status.conditions.append(
        Condition(type=kind, status=text, reason=reason, message=message,
                  last_transition_time=now_rfc3339())
    )


CONDITION_OF_PHASE = {
    Phase.estimating: "EfficiencyReady",
    Phase.profiling: "ProfilesReady",
    Phase.selecting: "Planned",
    Phase.training: "Trained",
}


def transition(
    status: PowerAwareTrainingJobStatus, to: Phase, reason: str, message: str
) -> tuple[str, str, str]:
    """Move to `to`; returns the Event (type, reason, message) to post."""
    before = status.phase
    status.phase, status.reason, status.message = to, reason, message
    # Waiting for power is not a plan yet: Planned stays unset until the share is granted.
    if (before in CONDITION_OF_PHASE and to not in (Phase.failed, Phase.waiting_for_power)
            and to is not before):
        set_condition(status, CONDITION_OF_PHASE[before], True, reason, message)
    if to is Phase.succeeded:
        set_condition(status, "Trained", True, reason, message)
        set_condition(status, "Ready", True, reason, message)
        status.finished_at = now_rfc3339()
    elif to is Phase.failed:
        set_condition(status, "Failed", True, reason, message)
        set_condition(status, "Ready", False, reason, message)
        status.finished_at = now_rfc3339()
    return ("Warning" if to is Phase.failed else "Normal", reason, f"{before} → {to}: {message}")


# --- training progress and messages --------------------------------------------------------


def apply_progress(training: TrainingStatus, event: TrainingEvent) -> None:
    """Fold a progress or result line of the current segment into the totals."""
    training.samples = training.carried_samples + event.samples
    if event.accuracy is not None:
        training.accuracy = event.accuracy
    usage = event.usage
    if usage is not None:
        training.device_seconds = training.carried_device_seconds + usage.device_time_s
        if usage.energy_j is not None:
            training.energy_joules = training.carried_energy_joules + usage.energy_j
        if usage.peak_power_w is not None:
            training.peak_power_watts = max(training.peak_power_watts or 0.0, usage.peak_power_w)
        training.simulated = usage.simulated
    if event.device:
        training.device = event.device
    if event.precision:
        training.precision = event.precision
    if event.reached_target is not None:
        training.reached_target = event.reached_target
    if event.samples_to_target is not None:
        training.samples_to_target = training.carried_samples + event.samples_to_target
    if event.gradient_noise_scale is not None:
        training.gradient_noise_scale = event.gradient_noise_scale


def infeasible_message(
    spec: PowerAwareTrainingJobSpec, rows: Sequence[Any], luts: Mapping[str, list[ProfilePoint]]
) -> str:
    """Why no device model can run under the limit, and the limit that would let one."""
    metric = spec.strategy.power_metric.value
    lowest = min(
        (p.peak_power_w if metric == "peak" else p.mean_power_w
         for points in luts.values() for p in points),
        default=math.nan,
    )
    errors = "; ".join(f"{r.device_model}: {r.error}" for r in rows if r.error)
    if math.isnan(lowest) or not all("within the power limit" in (r.error or "")
                                     for r in rows if r.error):
        return errors
    return (f"{errors}; raise spec.powerLimitWatts to at least {math.ceil(lowest * 100) / 100:g} W"
            f" (the lowest profiled {metric} power), or choose other batch sizes")


def unix_seconds(stamp: object) -> float | None:
    """RFC 3339 with or without fractions (metav1.Time, MicroTime) as unix seconds."""
    import datetime as dt

    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
