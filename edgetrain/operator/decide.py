"""The operator's reconcile as a pure function: `decide(spec, status, world) → (status, actions)`.

`world` is a frozen snapshot of everything one step looks at (the relevant ConfigMaps' data, this
job's Jobs, DaemonSets and pods, the candidate nodes, training load per node, the time); actions
are data (create, delete, patch, post an Event); both are defined in `world.py`. `reconcile.py`
gathers the world from kopf indexes and per-job reads and carries the actions out, so every
decision is unit-tested as a table without a cluster.

Over 500 lines because each phase's decisions (WaitingForPower and the PowerBudget share
included) are spelled out here, in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from edgetrain.api.budget import (
    ANNOTATION_POWER_ALLOCATION,
    GrantNotice,
    GrantPurpose,
    allocation_node,
    parse_allocation,
)
from edgetrain.api.efficiency import parse_efficiency_json
from edgetrain.api.job import PowerAwareTrainingJobSpec, efficiency_cache_key
from edgetrain.api.job_status import (
    EfficiencyStatus,
    Phase,
    PowerAwareTrainingJobStatus,
    PowerShareStatus,
    ProfileStatus,
    SelectionStatus,
    TrainingStatus,
)
from edgetrain.api.keys import (
    ANNOTATION_TRAINING_ACCURACY,
    ANNOTATION_TRAINING_SAMPLES,
    LABEL_DEVICE_MODEL,
    LABEL_PHASE,
)
from edgetrain.api.profile import ProfilePoint, parse_profile_csv
from edgetrain.api.training import TrainingEvent
from edgetrain.kube import Obj, now_rfc3339
from edgetrain.operator import estimate_manifests as em
from edgetrain.operator import estimate_parts as ep
from edgetrain.operator import history as hist
from edgetrain.operator import manifests as mf
from edgetrain.operator import phases as ph
from edgetrain.operator import roles
from edgetrain.operator.blocked import worker_blocked
from edgetrain.operator.phases import apply_progress, infeasible_message
from edgetrain.operator.settings import OperatorSettings
from edgetrain.operator.worker import PROGRESS_KEY, RESULT_KEY
from edgetrain.operator.world import (
    Action,
    Create,
    Decision,
    Delete,
    Patch,
    PostEvent,
    World,
)
from edgetrain.planner import InfeasibleError

# The condition that says why a worker's pod cannot start (True while it cannot).
BLOCKED = "WorkerBlocked"

# --- entry points --------------------------------------------------------------------------


def parse_status(raw: Mapping[str, Any] | None) -> PowerAwareTrainingJobStatus:
    """The status as stored (a hand-edited, unreadable status starts over as Pending)."""
    try:
        return PowerAwareTrainingJobStatus.model_validate(raw or {})
    except ValidationError:
        return PowerAwareTrainingJobStatus()


def parse_spec(raw: Mapping[str, Any] | None) -> PowerAwareTrainingJobSpec | str:
    """The spec, or the first problem naming `spec.<field>` (the CRD admits some specs the model
    refuses, e.g. cross-field checks)."""
    try:
        return PowerAwareTrainingJobSpec.model_validate(raw or {})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = "spec." + ".".join(str(p) for p in err["loc"])
        return f"{where}: {err['msg']}"


def decide(
    spec: PowerAwareTrainingJobSpec | str,
    status: PowerAwareTrainingJobStatus,
    world: World,
    settings: OperatorSettings,
) -> Decision:
    """One step of the phase machine; `status` is not modified (the result has a copy)."""
    out = Decision(status.model_copy(deep=True))
    if out.status.phase.final:
        return out
    if isinstance(spec, str):
        _transition(out, Phase.failed, "InvalidSpec", spec)
        return out
    retry_at = out.status.attempts.next_retry_at
    if retry_at and world.now_s < retry_at:
        return out
    step = _Step(spec, world, settings, out)
    {
        Phase.pending: step.pending,
        Phase.estimating: step.estimating,
        Phase.profiling: step.profiling,
        Phase.selecting: step.selecting,
        Phase.waiting_for_power: step.waiting_for_power,
        Phase.training: step.training,
    }[out.status.phase]()
    return out


def awaited_configmaps(status: PowerAwareTrainingJobStatus, name: str) -> list[str]:
    """The cache ConfigMaps whose publication moves job `name` on from its current phase."""
    if status.phase is Phase.estimating and status.efficiency is not None:
        # Each part published wakes the job too: the last one completes the vector.
        return [status.efficiency.config_map, ep.parts_configmap_name(
            em.estimate_job_name(name, status.attempts.estimate))]
    if status.phase is Phase.profiling:
        return [p.config_map for p in status.profiles]
    return []


def wake_groups(status: PowerAwareTrainingJobStatus, name: str,
                producing: Iterable[str] = ()) -> list[list[str]]:
    """The ways the wait of job `name` in its current phase ends, each a group of cache
    ConfigMaps that must all be there: an estimate ends when its vector is published (by
    another job's estimate of the same key) or when the last part of its own estimate is in
    (the parts ConfigMap counts as there once complete: one wake-up, not one per part);
    profiling ends when every profile is, or early for a profile this job itself makes
    (`producing`: its DaemonSet is then deleted, freeing the node)."""
    if status.phase is Phase.estimating and status.efficiency is not None:
        return [[status.efficiency.config_map], [ep.parts_configmap_name(
            em.estimate_job_name(name, status.attempts.estimate))]]
    if status.phase is Phase.profiling and status.profiles:
        names = [p.config_map for p in status.profiles]
        return [names, *[[cm] for cm in names if cm in set(producing)]]
    return []


# What a training tick records from its pod's progress: facts that only move forward, not a
# decision (`records_only`).
_PROGRESS_FIELDS = frozenset({
    "pod", "samples", "accuracy", "device_seconds", "energy_joules", "peak_power_watts",
    "reached_target", "simulated", "device", "precision", "samples_to_target",
    "gradient_noise_scale"})


def records_only(before: PowerAwareTrainingJobStatus, decision: Decision) -> bool:
    """The decision only records progress: the phase, message, conditions, attempts and
    Job stay as they were, it posts no Event, and its only actions are best-effort patches
    (the progress annotations on the training pod). Anything more, decided on a view that
    trails the API server (the watches), is taken again on fresh reads before it is acted on:
    a Job that looks finished or missing, a pod that looks refused, may only be late news."""
    if any(not (isinstance(a, Patch) and a.best_effort) for a in decision.actions):
        return False

    def decided(status: PowerAwareTrainingJobStatus) -> dict[str, Any]:
        out = status.model_dump()
        if out.get("training"):
            out["training"] = {k: v for k, v in out["training"].items()
                               if k not in _PROGRESS_FIELDS}
        return out

    return decided(before) == decided(decision.status)


def destructive(decision: Decision) -> bool:
    """The decision deletes a workload (`Delete.confirm`) or fails the job: taken on a view
    that trails the API server (the watches), it is taken again on fresh reads before it is
    acted on (a Job that looks failed or missing, a pod that looks refused, may be late news).
    Everything else acts on the watched view: a create is idempotent (deterministic names), a
    record moves forward."""
    return decision.status.phase is Phase.failed or any(
        isinstance(a, Delete) and a.confirm for a in decision.actions)


def _transition(out: Decision, to: Phase, reason: str, message: str) -> None:
    kind, why, text = ph.transition(out.status, to, reason, message)
    out.status.transitions += 1
    out.actions.append(PostEvent(kind, why, text, key=f"t{out.status.transitions}-{why}"))


# --- the phases ----------------------------------------------------------------------------


@dataclass
class _Step:
    spec: PowerAwareTrainingJobSpec
    world: World
    settings: OperatorSettings
    out: Decision

    @property
    def status(self) -> PowerAwareTrainingJobStatus:
        return self.out.status

    @property
    def ns(self) -> str:
        return self.world.namespace

    def act(self, action: Action) -> None:
        self.out.actions.append(action)

    def event(self, kind: str, reason: str, message: str) -> None:
        self.act(PostEvent(kind, reason, message))

    def announce(self, reason: str, what: str, message: str) -> None:
        """A start Event, keyed by the phase's entry and `what` starts (posted once; see
        `PostEvent`). Called before the Create it announces: an object that exists was
        announced, whichever replica made it."""
        self.act(PostEvent("Normal", reason, message,
                           key=f"t{self.status.transitions}-{what}"))

    def go(self, to: Phase, reason: str, message: str) -> None:
        _transition(self.out, to, reason, message)

    def pods_of_job(self, job_name: str) -> list[Obj]:
        return [p for p in self.world.pods
                if (p["metadata"].get("labels") or {}).get("job-name") == job_name
                or (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name")
                == job_name]

    # --- retries and waiting ---

    def failed_attempt(self, phase_key: str, what: str, outcome: ph.Outcome) -> bool:
        """Count a failure; True if the job is now Failed (limit reached or not retryable)."""
        status = self.status
        count = getattr(status.attempts, phase_key) + 1
        setattr(status.attempts, phase_key, count)
        detail = f"{what} failed (exit code {outcome.exit_code}, {outcome.reason})"
        if outcome.message:
            detail += f": {outcome.message}"
        limit = self.settings.retry_limit
        if outcome.exit_code == ph.EXIT_BAD_INPUT or count > limit:
            # Bad input fails the same way every time: retrying would only spend the budget.
            reason = "BadInput" if outcome.exit_code == ph.EXIT_BAD_INPUT else "RetryLimitReached"
            if reason == "RetryLimitReached":
                detail += f" (attempt {count} of {limit + 1})"
            self.go(Phase.failed, reason, detail)
            return True
        delay = ph.backoff_s(self.settings.retry_backoff_s, count)
        status.attempts.next_retry_at = self.world.now_s + delay
        status.message = f"{detail}; retry {count} of {limit} in {delay:g} s"
        self.event("Warning", f"{phase_key.capitalize()}Failed", status.message)
        return False

    def stuck(self, workload: Obj | None, pods: list[Obj], what: str) -> bool:
        """Say why the worker has no running pod (status, condition WorkerBlocked, a Warning
        Event when the cause appears) and fail the job once it has been so for the deadline.
        A pod that waits for resources (busy GPUs, a full node) is queueing: it only waits.
        True if the job is now Failed."""
        status, world = self.status, self.world
        name = str(((workload or {}).get("metadata") or {}).get("name", ""))
        blocked = worker_blocked(workload, pods, world.worker_events.get(name, ()))
        before = next((c for c in status.conditions if c.type == BLOCKED), None)
        if blocked is None or blocked.waits:
            if before is not None and before.status == "True":
                ph.set_condition(status, BLOCKED, False, "PodStarted" if blocked is None
                                 else "WaitingForResources", f"{what}: its pod was admitted")
                if blocked is None:
                    status.message = f"{what}: its pod was admitted"
            if blocked is not None:
                status.message = blocked.message(what)
            return False
        message = blocked.message(what)
        deadline = float(self.spec.worker_start_deadline_seconds
                         or self.settings.unschedulable_grace_s)
        waited = None if blocked.since_s is None else world.now_s - blocked.since_s
        if waited is not None and waited >= deadline:
            if name:  # its controller would go on trying, and start a pod once the cause is gone
                ds = name in world.daemonsets
                self.act(Delete("apps/v1" if ds else "batch/v1", "daemonsets" if ds else "jobs",
                                self.ns, name))
            self.go(Phase.failed, blocked.cause,
                    f"{message} (for {waited:.0f} s; spec.workerStartDeadlineSeconds is"
                    f" {deadline:g} s)")
            return True
        status.message = f"{message} (the job fails after {deadline:g} s)"
        if before is None or before.status != "True" or before.reason != blocked.cause:
            self.event("Warning", blocked.cause, message)
        ph.set_condition(status, BLOCKED, True, blocked.cause, message)
        return False

    def no_node(self, waiting: str, failing: str) -> None:
        """No Ready node matches: wait within the grace period, then fail with what exists."""
        attempts = self.status.attempts
        since = attempts.waiting_for_node_since
        if since is None:
            attempts.waiting_for_node_since = since = self.world.now_s
        waited = self.world.now_s - since
        grace = self.settings.no_node_grace_s
        if waited < grace:
            self.status.message = f"waiting: {waiting} (fails after {grace:g} s)"
            return
        self.go(Phase.failed, failing, f"{waiting} for {waited:.0f} s; {self.fleet()}")

    def fleet(self) -> str:
        """The device models that do exist (Ready count of each), and what to change."""
        models: dict[str, list[bool]] = {}
        for node in self.world.nodes:
            labels = node.label_map
            if LABEL_DEVICE_MODEL in labels and ph.matches(labels, self.settings.jetson_selector):
                models.setdefault(labels[LABEL_DEVICE_MODEL], []).append(node.schedulable)
        if not models:
            return ("the cluster has no Jetson node (none carries"
                    f" {self.settings.jetson_selector} and {LABEL_DEVICE_MODEL}); add one")
        seen = ", ".join(f"{m} ({sum(r)} of {len(r)} Ready)" for m, r in sorted(models.items()))
        return (f"device models in the cluster: {seen}; set spec.placement.nodeSelector to"
                " match one of them")

    # --- Pending ---

    def pending(self) -> None:
        problem = ph.bad_input(self.spec, f"{self.ns}/{self.world.name}")
        if problem is not None:  # fail before any pod runs: a typo must not cost an estimate
            self.go(Phase.failed, "BadInput", problem)
            return
        if self.world.worker_identity is False:
            self.go(Phase.failed, "NoWorkerIdentity",
                    ph.no_worker_identity(self.ns, self.settings.worker_service_account))
            return
        # No write but the phase: the progress ConfigMap is made when training starts.
        self.status.started_at = now_rfc3339()
        self.go(Phase.estimating, "Started", "estimating the batch-size efficiency vector")

    # --- EstimatingEfficiency ---

    def estimating(self) -> None:
        status, spec, world = self.status, self.spec, self.world
        key = efficiency_cache_key(spec, mf.weights_identity(spec))
        cm_name = mf.efficiency_configmap_name(key)
        job_name = em.estimate_job_name(world.name, status.attempts.estimate)
        job = world.jobs.get(job_name)
        if "efficiency.json" in world.configmaps.get(cm_name, {}):
            cached = job is None and status.efficiency is None
            status.efficiency = EfficiencyStatus(config_map=cm_name, key=key, cached=cached)
            how = "cache hit" if cached else "estimated"
            self.go(Phase.profiling, "EfficiencyReady", f"efficiency vector {cm_name} ({how})")
            return
        status.efficiency = EfficiencyStatus(config_map=cm_name, key=key, cached=False)
        if job is None:
            other = self.other_producer(key)
            if other:
                status.message = f"waiting for {other}, which estimates the same vector"
                return
            if self.refused(roles.estimator_refusal(world.servers, self.settings)):
                return
            width = ep.parallelism(world.servers, spec, self.settings)
            body = em.estimate_job(world.job, spec, self.settings, key=key,
                                   attempt=status.attempts.estimate, parallelism=width,
                                   inject=self.inject("estimate", status.attempts.estimate),
                                   hold_release=mf.injected_hold(world.job, self.settings,
                                                                 "estimate"))
            runs = body["spec"]["completions"]
            self.announce("EstimateStarted", f"estimate-{status.attempts.estimate}",
                          f"job {job_name} on the GPU servers ({runs} runs, {width} at once)")
            # No parts ConfigMap first: the pods' applies make it (one request per part).
            self.act(Create("batch/v1", "jobs", body))
            status.attempts.next_retry_at = None
            # As the waits that follow say it while no run is done: a poll then writes nothing.
            status.message = f"estimating in job {job_name}: 0 of {runs} runs done"
            return
        pods = self.pods_of_job(job_name)
        outcome = ph.job_outcome(job, pods)
        verdict = ep.parts_verdict(
            world.configmaps.get(ep.parts_configmap_name(job_name)),
            tag=ep.part_tag(key, str(job["metadata"].get("uid") or "")), spec=spec,
            job_state=outcome.state)
        if verdict.kind == "merge" and verdict.vector is None:
            self.go(Phase.failed, "BadInput", verdict.message)  # no run reached the target
            return
        if verdict.kind == "merge" and verdict.vector is not None:
            # Cached as a single estimate pod publishes it (409: the same vector is in).
            self.act(Create("v1", "configmaps",
                            em.efficiency_configmap(self.ns, spec, key, verdict.vector)))
            self.go(Phase.profiling, "EfficiencyReady",
                    f"efficiency vector {cm_name} (estimated in {verdict.total} runs by job"
                    f" {job_name})")
            return
        if verdict.kind == "failed":
            if outcome.state != "failed":
                outcome = ph.Outcome("failed", None, "NotPublished",
                                     f"job {job_name} finished without writing {cm_name}:"
                                     f" {verdict.message}")
            self.failed_attempt("estimate", f"estimate job {job_name}", outcome)
            return
        status.message = f"estimating in job {job_name}: {verdict.progress}"
        self.stuck(job, pods, f"estimate job {job_name}")

    def refused(self, refusal: str | None) -> bool:
        """Fail the job where the phase's image cannot run on its node (roles.py), rather
        than start a pod that cannot exec its entry point."""
        if refusal is None:
            return False
        self.go(Phase.failed, "NoImageForArchitecture", refusal)
        return True

    def other_producer(self, key: str) -> str | None:
        for prod in self.world.producers.get(key, ()):
            if prod.owner != self.world.uid:
                return prod.what
        return None

    def inject(self, phase_key: str, failures_so_far: int) -> str | None:
        planned = mf.injected_failures(self.world.job, self.settings).get(phase_key, 0)
        if failures_so_far < planned:
            return f"{phase_key} attempt {failures_so_far + 1} of {planned} injected to fail"
        return None

    # --- Profiling ---

    def selector(self) -> dict[str, str]:
        return {**self.settings.jetson_selector, **self.spec.placement.node_selector}

    def no_match_text(self) -> str:
        return (f"no Ready node matches spec.placement.nodeSelector"
                f" {self.spec.placement.node_selector} and the operator's jetsonSelector"
                f" {self.settings.jetson_selector}")

    def profiling(self) -> None:
        status, spec, world = self.status, self.spec, self.world
        cands = ph.candidates(world.nodes, self.selector())
        if not cands:
            self.no_node(self.no_match_text(), "NoMatchingNode")
            return
        status.attempts.waiting_for_node_since = None
        known = {p.key: p for p in status.profiles}
        profiles, pending = [], []
        for cand in cands:
            swept = ph.sweep_spec(spec, status, cand.device_model)
            key = mf.profile_key(swept, cand.device_model, cand.l4t)
            cut = swept.power_limit_watts if spec.strategy.profiling == "frontier" else None
            share = status.power_share
            node = (share.node if share is not None and share.purpose == "profile"
                    and share.watts is not None and share.device_model == cand.device_model
                    and share.node in cand.nodes else cand.nodes[0])
            prof = ProfileStatus(device_model=cand.device_model, node=node, l4t=cand.l4t,
                                 config_map=mf.profile_configmap_name(key), key=key,
                                 power_limit_watts=cut)
            ds_name = mf.short_name(world.name, f"profile-{mf.label_value(prof.device_model)}")
            if "profile.csv" in world.configmaps.get(prof.config_map, {}):
                prev = known.get(prof.key)
                # Cached: it was there before this job waited for it.
                prof.cached = True if prev is None else bool(prev.cached)
                if ds_name in world.daemonsets:
                    self.act(Delete("apps/v1", "daemonsets", self.ns, ds_name,
                                    foreground=status.power_share is not None, confirm=False))
            else:
                pending.append((prof, ds_name))
            profiles.append(prof)
        status.profiles = profiles
        waits = []
        for prof, ds_name in pending:
            other = None if ds_name in world.daemonsets else self.other_producer(prof.key)
            budget = self.budget_of(prof.node)
            if other:  # another job is making the same LUT: use it when it is published
                waits.append(f"waiting for {other}, which profiles the same LUT")
            elif budget is not None and not self.sweep_granted(budget, prof, ds_name):
                return  # a sweep on a budgeted node waits for its grant
            elif self.profile_one(prof, ds_name):
                return
        if pending:
            status.message = "; ".join(
                ["profiling " + ", ".join(p.device_model for p, _ in pending), *waits])
            return
        hits = sum(1 for p in profiles if p.cached)
        self.go(Phase.selecting, "ProfilesReady",
                f"{len(profiles)} profile(s), {hits} from the cache: "
                + ", ".join(f"{p.device_model}={p.config_map}" for p in profiles))

    def sweep_granted(self, budget: str, prof: ProfileStatus, ds_name: str) -> bool:
        """A sweep on a node under `budget` runs only under a profiling grant there (its ceiling
        is the grant); without one, or once a newer grant replaced it, the job stops the sweep
        and waits. True when the sweep may go on."""
        share, notice = self.status.power_share, self.notice(budget)
        held = (share is not None and share.purpose == "profile" and share.budget == budget
                and share.device_model == prof.device_model and share.watts is not None)
        if held and share is not None and (notice is None or notice.sequence == share.sequence):
            return True
        if ds_name in self.world.daemonsets:
            self.act(Delete("apps/v1", "daemonsets", self.ns, ds_name, foreground=True))
        reason = ("a profiling sweep on a budgeted node needs a grant" if not held
                  else "its profiling grant changed; sweeping again under the new one")
        self.wait_for_power(budget, prof.node, prof.device_model,
                            notice.reason if notice is not None and notice.reason else reason,
                            "PowerWithdrawn" if held else "WaitingForPower", purpose="profile")
        return False

    def profile_one(self, prof: ProfileStatus, ds_name: str) -> bool:
        """Start or watch one device model's profiling; True if the job failed."""
        status, world = self.status, self.world
        if ds_name not in world.daemonsets:
            if self.refused(roles.image_refusal("trainer", world.node(prof.node),
                                                self.settings)):
                return True
            share = status.power_share
            granted = (share is not None and share.purpose == "profile"
                       and share.device_model == prof.device_model)
            body = mf.profile_daemonset(world.job,
                                        ph.sweep_spec(self.spec, status, prof.device_model),
                                        self.settings,
                                        device_model=prof.device_model, node=prof.node,
                                        l4t=prof.l4t, key=prof.key,
                                        inject=self.inject("profile", status.attempts.profile),
                                        ceiling_w=share.watts if granted and share else None,
                                        grant_sequence=share.sequence if granted and share
                                        else None)
            self.announce("ProfilingStarted", f"profile-{ds_name}",
                          f"{prof.device_model} on {prof.node} ({ds_name})")
            self.act(Create("apps/v1", "daemonsets", body))
            status.attempts.next_retry_at = None
            return False
        model = mf.label_value(prof.device_model)
        pods = [p for p in world.pods
                if (p["metadata"].get("labels") or {}).get(LABEL_PHASE) == "profile"
                and (p["metadata"].get("labels") or {}).get(LABEL_DEVICE_MODEL) == model]
        failures, message = ph.daemonset_failures(pods)
        if failures > status.attempts.profile:
            outcome = ph.Outcome("failed", None, "ProfilingFailed", message)
            # The DaemonSet restarts the pod itself; the operator only counts and gives up.
            status.attempts.profile = failures - 1
            if self.failed_attempt("profile", f"profiling {prof.device_model}", outcome):
                self.act(Delete("apps/v1", "daemonsets", self.ns, ds_name))
                return True
            status.attempts.next_retry_at = None  # the DaemonSet's own back-off applies
        return self.stuck(world.daemonsets.get(ds_name), pods, f"profiling {prof.device_model}")

    # --- Selecting ---

    def selecting(self) -> None:
        status, spec, world = self.status, self.spec, self.world
        if status.efficiency is None or not status.profiles:
            self.go(Phase.estimating, "NoInputs", "efficiency or profiles missing in status")
            return
        eff_data = world.configmaps.get(status.efficiency.config_map, {})
        if "efficiency.json" not in eff_data:
            status.efficiency = None
            self.go(Phase.estimating, "CacheMissing",
                    "efficiency ConfigMap vanished; estimating again")
            return
        efficiency = parse_efficiency_json(eff_data["efficiency.json"],
                                           status.efficiency.config_map)
        lost = frozenset(status.training.nodes_lost if status.training else [])
        cands = {c.device_model: c for c in ph.candidates(world.nodes, self.selector(), lost)}
        luts: dict[str, list[ProfilePoint]] = {}
        for prof in status.profiles:
            if prof.device_model not in cands:
                continue
            data = world.configmaps.get(prof.config_map, {})
            if "profile.csv" not in data:
                self.go(Phase.profiling, "CacheMissing",
                        f"{prof.config_map} vanished; profiling again")
                return
            luts[prof.device_model] = parse_profile_csv(data["profile.csv"], prof.config_map)
        if not luts:
            lost_text = f" (lost: {sorted(lost)})" if lost else ""
            self.no_node(f"no Ready candidate node is left{lost_text}; {self.no_match_text()}",
                         "NoCandidateNode")
            return
        status.attempts.waiting_for_node_since = None
        # Recurring jobs: the proxy's r corrected by earlier jobs' observations, gated on the
        # profile it plans on (issues 30, 41).
        hist_cm = hist.history_configmap_name(hist.spec_history_key(spec))
        efficiency, status.efficiency.history, skipped = hist.plan_input(
            spec, efficiency, dict(world.configmaps.get(hist_cm, {})), world.name, luts,
            world.configmaps)
        for warning in skipped:
            self.event("Warning", "ObservationSkipped", warning)
        model, result, rows = ph.plan_candidates(spec, efficiency, luts)
        if model is None or result is None:
            self.go(Phase.failed, "Infeasible", infeasible_message(spec, rows, luts))
            return
        ranked = [r.device_model for r in sorted(
            (r for r in rows if r.objective_value is not None),
            key=lambda r: r.objective_value or 0.0)]
        load = {n: world.training_load.get(n, 0) for c in cands.values() for n in c.nodes}
        share = status.power_share
        granted_on = allocation_node(world.annotations.get(ANNOTATION_POWER_ALLOCATION))
        on_granted = [m for m in ranked if granted_on in cands[m].nodes]
        if share is not None and on_granted:
            model, node = on_granted[0], granted_on  # the budget gives one node to one job
        elif share is not None and share.device_model in ranked and share.node in cands[
                share.device_model].nodes and load.get(share.node, 0) == 0:
            model, node = share.device_model, share.node  # the node its share was asked for
        else:
            model, node = ph.place(ranked, {m: c.nodes for m, c in cands.items()}, load)
        if model != ranked[0]:
            result = ph.plan_for(spec, efficiency, luts[model])
        limit_watts = spec.power_limit_watts
        budget = self.budget_of(node)
        if budget is not None:
            watts, reason = self.granted(budget, "train")
            if watts is None:
                self.wait_for_power(budget, node, model, reason)
                return
            self.share_granted(budget, node, model, watts)
            limit_watts = min(spec.power_limit_w, watts)
            try:
                result = ph.plan_for(spec.model_copy(update={"power_limit_watts": limit_watts}),
                                     efficiency, luts[model])
            except InfeasibleError as exc:
                self.wait_for_power(budget, node, model, f"its share does not fit: {exc}")
                return
        else:
            status.power_share = None
        status.selection = SelectionStatus(
            node=node, device_model=model, batch_size=result.batch_size,
            gpu_frequency_hz=result.gpu_freq_hz,
            gpu_frequency_m_hz=round(result.gpu_freq_hz / 1e6),
            cpu_cores=result.cpu_cores, cpu_frequency_hz=result.cpu_freq_hz,
            emc_frequency_hz=result.emc_freq_hz,
            power_watts=result.power_w, power_limit_watts=limit_watts,
            predicted_seconds=result.predicted_seconds, relative_time=result.relative_time,
            objective=spec.strategy.objective.value, baselines=ph.baselines(result),
            candidates=rows,
        )
        pred = ("" if result.predicted_seconds is None
                else f", predicted {result.predicted_seconds:.1f} s")
        self.go(Phase.training, "Planned",
                f"{model} on {node}: b={result.batch_size}, f={result.gpu_freq_hz / 1e6:.0f} MHz,"
                f" {result.power_w:.2f} W{pred}")

    # --- Training ---

    def progress(self) -> tuple[TrainingEvent | None, TrainingEvent | None]:
        data = self.world.configmaps.get(mf.progress_configmap_name(self.world.name), {})
        return (TrainingEvent.from_line(data.get(PROGRESS_KEY) or ""),
                TrainingEvent.from_line(data.get(RESULT_KEY) or ""))

    def stop_training(self, training: TrainingStatus, progress: TrainingEvent | None,
                      foreground: bool = False) -> None:
        """Delete the training Job (`foreground`: it stays, deleting, until its pods have
        ended, so a budget counts them through it), keep its progress."""
        if training.job:
            self.act(Delete("batch/v1", "jobs", self.ns, training.job, foreground=foreground))
        if progress is not None:
            apply_progress(training, progress)
        training.job = training.pod = None
        self.act(Patch("v1", "configmaps", self.ns, mf.progress_configmap_name(self.world.name),
                       {"data": {PROGRESS_KEY: None, RESULT_KEY: None}}))

    def training(self) -> None:
        status, spec, world = self.status, self.spec, self.world
        sel = status.selection
        if sel is None:  # status edited by hand, or lost: plan again
            self.go(Phase.selecting, "NoSelection", "no plan in status; planning")
            return
        training = status.training or TrainingStatus()
        status.training = training
        progress, result = self.progress()
        share = status.power_share
        if share is not None:
            # A node the view does not show keeps its share: only a node seen outside every
            # budget releases it (a watch that lost the node must not lift the cap).
            seen = world.node(sel.node) is not None
            budget = self.budget_of(sel.node) if seen else share.budget
            notice = self.notice(share.budget)
            if budget != share.budget:
                status.power_share = None  # the budget is gone: the job's own limit again
            elif notice is not None and notice.sequence != share.sequence:
                watts = notice.watts if notice.purpose == "train" else None
                if watts is None:
                    self.stop_training(training, progress, foreground=True)
                    training.segment += 1
                    why = notice.reason or "by the budget"
                    self.wait_for_power(share.budget, sel.node, sel.device_model or "",
                                        f"its share was withdrawn: {why}", "PowerWithdrawn")
                    return
                # Echoed now: a changed grant re-plans below (the limit-change path).
                share.watts, share.sequence = watts, notice.sequence
            if status.power_share is not None and share.watts is not None:
                self.spec = spec = spec.model_copy(
                    update={"power_limit_watts": min(spec.power_limit_w, share.watts)})
        # 1. The limit changed: re-plan (profiles cut at a higher limit still cover a lower one).
        if sel.power_limit_watts != spec.power_limit_watts:
            self.stop_training(training, progress, foreground=status.power_share is not None)
            training.segment += 1
            if ph.profiles_cover_limit(status.profiles, spec.power_limit_w):
                to, why = Phase.selecting, "re-planning from the existing profiles"
            else:
                to, why = Phase.profiling, "profiling up to the new limit"
            self.go(to, "PowerLimitChanged",
                    f"power limit {sel.power_limit_watts} W → {spec.power_limit_watts} W; {why}")
            return
        # 2. The node is gone or not Ready: choose another node, resume from the checkpoint.
        node = world.node(sel.node)
        if node is None or not node.schedulable:
            self.stop_training(training, progress)
            training.nodes_lost.append(sel.node)
            self.go(Phase.selecting, "NodeLost",
                    f"node {sel.node} is {'gone' if node is None else 'not Ready'}; rescheduling"
                    " from the last checkpoint")
            return
        if training.job is None:
            self.start_training(training, sel)
            return
        job = world.jobs.get(training.job)
        if job is None:
            # Recorded but not there: the status was written first and the replica died
            # before it made the Job, or it was deleted under us. Made again under the same
            # name and announcement key: it resumes from its checkpoint.
            self.start_training(training, sel, again=True)
            return
        pods = self.pods_of_job(training.job)
        newest = max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)
        if newest is not None:
            training.pod = newest["metadata"]["name"]
        if progress is not None:
            apply_progress(training, progress)
            if newest is not None:
                self.annotate_progress(newest, training)
        outcome = ph.job_outcome(job, pods)
        if outcome.state == "running":
            self.stuck(job, pods, f"training job {training.job}")
            return
        if result is not None:
            apply_progress(training, result)
        if outcome.state == "succeeded" or outcome.exit_code == ph.EXIT_BUDGET:
            # Reached or not (then censored at the budget), it is what this b costs here.
            reached = outcome.state == "succeeded"  # exit 0: the trainer reached the target
            learned = status.efficiency.history if status.efficiency else None
            for action in hist.record_actions(spec, world.job, sel.batch_size, training, reached,
                                              learned):
                self.act(action)
        if outcome.state == "succeeded":
            self.go(Phase.succeeded, "TargetReached",
                    f"accuracy {training.accuracy or 0:.3f} after {training.samples} samples,"
                    f" {training.device_seconds:.1f} s device time"
                    + (" (simulated)" if training.simulated else ""))
            return
        if outcome.exit_code == ph.EXIT_BUDGET:
            self.go(Phase.failed, "BudgetExhausted",
                    f"sample budget {spec.budget.train_samples} spent at accuracy"
                    f" {training.accuracy or 0:.3f} (target {spec.target_accuracy}); raise"
                    " spec.budget.trainSamples or lower spec.targetAccuracy")
            return
        if not self.failed_attempt("train", f"training job {training.job}", outcome):
            self.act(Delete("batch/v1", "jobs", self.ns, training.job))
            training.job = None

    # --- PowerBudget shares ---

    def budget_of(self, node_name: str) -> str | None:
        """The PowerBudget whose selector takes the node (by name, the first of several: the
        budget loop marks the overlap and grants nothing new there)."""
        node = self.world.node(node_name)
        if node is None:
            return None
        names = sorted(b for b, sel in self.world.budgets.items() if sel.matches(node.label_map))
        return names[0] if names else None

    def notice(self, budget: str) -> GrantNotice | None:
        """The grant notice on this job under `budget` (None: none yet)."""
        notice = parse_allocation(self.world.annotations.get(ANNOTATION_POWER_ALLOCATION))
        return notice if notice is not None and notice.budget == budget else None

    def granted(self, budget: str, purpose: GrantPurpose) -> tuple[float | None, str]:
        """The watts this job's notice grants under `budget` for `purpose` (None: none yet),
        and why not."""
        notice = self.notice(budget)
        if notice is None:
            return None, "not allocated yet"
        if notice.watts is not None and notice.purpose != purpose:
            return None, f"asking for a {purpose} share"
        return notice.watts, notice.reason or ("" if notice.watts is not None
                                                 else "not allocated yet")

    def wait_for_power(self, budget: str, node: str, model: str, reason: str,
                       why: str = "WaitingForPower", purpose: GrantPurpose = "train") -> None:
        """Ask for a share and wait. The job acts on no grant now: it echoes the last one it
        was notified, which releases what it held once its older pods have ended."""
        notice = self.notice(budget)
        self.status.power_share = PowerShareStatus(
            budget=budget, node=node, device_model=model, purpose=purpose,
            sequence=notice.sequence if notice is not None else 0)
        self.go(Phase.waiting_for_power, why,
                f"waiting for power from PowerBudget {budget} on {node}: {reason}")

    def share_granted(self, budget: str, node: str, model: str, watts: float,
                      purpose: GrantPurpose = "train") -> None:
        """Plan under the grant notified now, and echo its sequence."""
        notice = self.notice(budget)
        self.status.power_share = PowerShareStatus(
            budget=budget, node=node, device_model=model, watts=watts, purpose=purpose,
            sequence=notice.sequence if notice is not None else 0)

    # --- WaitingForPower ---

    def waiting_for_power(self) -> None:
        share = self.status.power_share
        seen = share is not None and self.world.node(share.node) is not None
        if share is None or (seen and self.budget_of(share.node) != share.budget):
            back = Phase.selecting if share is None or share.purpose == "train" \
                else Phase.profiling
            self.status.power_share = None  # the node is under no budget (or another) now
            self.go(back, "BudgetChanged", "the node's PowerBudget changed; planning")
            return
        watts, reason = self.granted(share.budget, share.purpose)
        notice = self.notice(share.budget)
        if watts is not None and notice is not None:
            if share.purpose == "profile":
                self.share_granted(share.budget, notice.node or share.node, share.device_model,
                                   watts, "profile")
                self.go(Phase.profiling, "PowerGranted",
                        f"PowerBudget {share.budget} grants a {watts:.2f} W profiling ceiling"
                        f" on {notice.node or share.node}")
                return
            self.go(Phase.selecting, "PowerGranted",
                    f"PowerBudget {share.budget} grants {watts:.2f} W on {share.node}")
            return
        if notice is not None:
            share.sequence = notice.sequence  # acting on nothing: echo the latest
        self.status.message = (f"waiting for power from PowerBudget {share.budget} on"
                               f" {share.node}: {reason}")

    def start_training(self, training: TrainingStatus, sel: SelectionStatus,
                       again: bool = False) -> None:
        """Make the training Job of the next attempt; `again`: the recorded attempt's Job, as
        it was recorded (same name, checkpoint and carry)."""
        status = self.status
        if self.refused(roles.image_refusal("trainer", self.world.node(sel.node),
                                            self.settings)):
            return
        ckpt = training.checkpoint_dir
        carry = training.carry_from if again else None
        if again and ckpt:
            pass
        elif not ckpt or not ckpt.endswith(f"-b{sel.batch_size}"):
            # The trainer's checkpoints are tied to b: a new b gets a new folder.
            ckpt = mf.checkpoint_dir(self.settings, self.world.job,
                                     f"run{training.attempt + 1}-b{sel.batch_size}")
        if not again and training.checkpoint_dir and training.checkpoint_dir != ckpt:
            carry = training.checkpoint_dir
            training.carried_samples = training.samples
            training.carried_device_seconds = training.device_seconds
            training.carried_energy_joules = training.energy_joules or 0.0
        if not again:
            training.attempt += 1
            training.carry_from = carry
        share = status.power_share
        body = mf.train_job(self.world.job, self.spec, self.settings, node=sel.node,
                            batch_size=sel.batch_size, gpu_frequency_hz=sel.gpu_frequency_hz,
                            attempt=training.attempt, ckpt_dir=ckpt, carry_from=carry,
                            inject=self.inject("train", status.attempts.train),
                            hold_release=mf.injected_hold(self.world.job, self.settings,
                                                          "train"),
                            power_mode=ph.power_mode(sel),
                            grant_sequence=share.sequence if share is not None else None)
        job_name = body["metadata"]["name"]
        self.announce("TrainingStarted", f"train-{training.attempt}",
                      f"job {job_name} on {sel.node} (b={sel.batch_size},"
                      f" f={sel.gpu_frequency_hz / 1e6:.0f} MHz)")
        if mf.progress_configmap_name(self.world.name) not in self.world.configmaps:
            # Before the Job: its pod publishes its progress and result into it.
            self.act(Create("v1", "configmaps", mf.progress_configmap(self.world.job)))
        self.act(Create("batch/v1", "jobs", body))
        training.job, training.node, training.checkpoint_dir = job_name, sel.node, ckpt
        status.attempts.next_retry_at = None
        status.message = f"training in job {training.job} on {sel.node}"

    def annotate_progress(self, pod: Obj, training: TrainingStatus) -> None:
        """Progress on the training pod, where the node agent exports it for the dashboards."""
        want = {ANNOTATION_TRAINING_SAMPLES: str(training.samples)}
        if training.accuracy is not None:
            want[ANNOTATION_TRAINING_ACCURACY] = f"{training.accuracy:.4f}"
        have = pod["metadata"].get("annotations") or {}
        if all(have.get(k) == v for k, v in want.items()):
            return
        # Progress on the dashboard is not worth failing a job: best effort.
        self.act(Patch("v1", "pods", self.ns, pod["metadata"]["name"],
                       {"metadata": {"annotations": want}}, best_effort=True))
