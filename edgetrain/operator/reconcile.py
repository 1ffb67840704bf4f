"""One reconcile step of a PowerAwareTrainingJob: read the world, act, return the new status.

Over 500 lines because each phase's step reads and writes the API through the helpers it shares
with the others; the pure decisions already live in phases.py.

Level-triggered and idempotent: every object has a deterministic name, creation tolerates
"already exists", and a repeated call with nothing new changes nothing. The kopf handlers call
`Reconciler.reconcile` and write what it returns.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from pydantic import ValidationError

from edgetrain.api.efficiency import parse_efficiency_json
from edgetrain.api.job import PowerAwareTrainingJobSpec, efficiency_cache_key
from edgetrain.api.job_status import (
    EfficiencyStatus,
    Phase,
    PowerAwareTrainingJobStatus,
    ProfileStatus,
    SelectionStatus,
    TrainingStatus,
)
from edgetrain.api.keys import (
    ANNOTATION_TRAINING_ACCURACY,
    ANNOTATION_TRAINING_SAMPLES,
    LABEL_CACHE_KEY,
    LABEL_DEVICE_MODEL,
    LABEL_JOB,
    LABEL_PHASE,
)
from edgetrain.api.profile import parse_profile_csv
from edgetrain.api.training import TrainingEvent
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path, node_schedulable, now_rfc3339
from edgetrain.operator import manifests as mf
from edgetrain.operator import phases as ph
from edgetrain.operator.settings import OperatorSettings
from edgetrain.operator.worker import PROGRESS_KEY, RESULT_KEY

Event = tuple[str, str, str]
log = logging.getLogger("edgetrain.operator")


@dataclass
class Step:
    """What one reconcile decided: the status to write and the Events to post."""

    status: PowerAwareTrainingJobStatus
    events: list[Event] = field(default_factory=list)


class Reconciler:
    """Reconciles jobs with one API client and the operator settings."""

    def __init__(self, client: KubeClient, settings: OperatorSettings) -> None:
        self.kube = client
        self.settings = settings
        self._rbac_done: set[str] = set()

    # --- small API helpers ---

    def _create(self, api_version: str, plural: str, obj: Obj) -> bool:
        """Create; False if it already existed."""
        ns = obj["metadata"].get("namespace")
        try:
            self.kube.create(api_path(api_version, plural, ns), obj)
            return True
        except KubeApiError as exc:
            if exc.code == 409:
                return False
            raise

    def _delete(self, api_version: str, plural: str, ns: str, name: str) -> None:
        try:
            self.kube.delete(api_path(api_version, plural, ns, name),
                             {"propagationPolicy": "Background"})
        except KubeApiError as exc:
            if exc.code != 404:
                raise

    def _configmap(self, ns: str, name: str) -> Obj | None:
        return self.kube.get_or_none(api_path("v1", "configmaps", ns, name))

    def _pods(self, ns: str, selector: str) -> list[Obj]:
        return list(self.kube.get(api_path("v1", "pods", ns), labelSelector=selector)["items"])

    def _active_producer(self, ns: str, plural: str, key: str, patj: Obj) -> str | None:
        """Another job's estimate Job / profiling DaemonSet for the same cache key, if running."""
        group = "batch/v1" if plural == "jobs" else "apps/v1"
        items = self.kube.get(api_path(group, plural, ns),
                              labelSelector=f"{LABEL_CACHE_KEY}={key}")["items"]
        mine = mf.label_value(patj["metadata"]["name"])
        for obj in items:
            labels = obj["metadata"].get("labels") or {}
            if labels.get(LABEL_JOB) == mine or obj["metadata"].get("deletionTimestamp"):
                continue
            st = obj.get("status") or {}
            done = plural == "jobs" and (st.get("succeeded") or st.get("failed"))
            if not done:
                return f"{plural[:-1]} {obj['metadata']['name']}"
        return None

    def worker_identity_missing(self, ns: str) -> bool:
        """True if `ns` lacks the worker ServiceAccount, which the chart creates per namespace
        (the operator creates no RBAC); found ones are remembered for this operator run."""
        if ns in self._rbac_done:
            return False
        sa = self.settings.worker_service_account
        if self.kube.get_or_none(api_path("v1", "serviceaccounts", ns, sa)) is None:
            return True
        self._rbac_done.add(ns)
        return False

    # --- entry point ---

    def reconcile(self, patj: Obj) -> Step:
        """Advance the job as far as the world allows right now."""
        try:
            status = PowerAwareTrainingJobStatus.model_validate(patj.get("status") or {})
        except ValidationError:
            status = PowerAwareTrainingJobStatus()
        step = Step(status)
        status.observed_generation = patj["metadata"].get("generation")
        if status.phase.final:
            return step
        try:
            spec = PowerAwareTrainingJobSpec.model_validate(patj.get("spec") or {})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = "spec." + ".".join(str(p) for p in err["loc"])
            step.events.append(ph.transition(status, Phase.failed, "InvalidSpec",
                                             f"{where}: {err['msg']}"))
            return step
        if status.attempts.next_retry_at and time.time() < status.attempts.next_retry_at:
            return step
        handler = {
            Phase.pending: self._pending,
            Phase.estimating: self._estimating,
            Phase.profiling: self._profiling,
            Phase.selecting: self._selecting,
            Phase.training: self._training,
        }[status.phase]
        for _ in range(5):  # follow transitions that need no waiting within one call
            before = status.phase
            handler(patj, spec, step)
            if status.phase is before or status.phase.final:
                break
            handler = {
                Phase.estimating: self._estimating,
                Phase.profiling: self._profiling,
                Phase.selecting: self._selecting,
                Phase.training: self._training,
            }.get(status.phase, self._noop)
        return step

    def _noop(self, patj: Obj, spec: PowerAwareTrainingJobSpec, step: Step) -> None:
        return None

    # --- retries ---

    def _failed_attempt(
        self, step: Step, phase_key: str, what: str, outcome: ph.Outcome
    ) -> bool:
        """Count a failure; True if the job is now Failed (limit reached or not retryable)."""
        status = step.status
        count = getattr(status.attempts, phase_key) + 1
        setattr(status.attempts, phase_key, count)
        detail = f"{what} failed (exit code {outcome.exit_code}, {outcome.reason})"
        if outcome.message:
            detail += f": {outcome.message}"
        if outcome.exit_code == ph.EXIT_BAD_INPUT or count > self.settings.retry_limit:
            reason = "BadInput" if outcome.exit_code == ph.EXIT_BAD_INPUT else "RetryLimitReached"
            if reason == "RetryLimitReached":
                detail += f" (attempt {count} of {self.settings.retry_limit + 1})"
            step.events.append(ph.transition(status, Phase.failed, reason, detail))
            return True
        delay = ph.backoff_s(self.settings.retry_backoff_s, count)
        status.attempts.next_retry_at = time.time() + delay
        status.message = f"{detail}; retry {count} of {self.settings.retry_limit} in {delay:g} s"
        step.events.append(("Warning", f"{phase_key.capitalize()}Failed", status.message))
        return False

    def _inject(self, patj: Obj, phase_key: str, failures_so_far: int) -> str | None:
        planned = mf.injected_failures(patj, self.settings).get(phase_key, 0)
        if failures_so_far < planned:
            return f"{phase_key} attempt {failures_so_far + 1} of {planned} injected to fail"
        return None

    # --- phases ---

    def _pending(self, patj: Obj, spec: PowerAwareTrainingJobSpec, step: Step) -> None:
        ns = patj["metadata"]["namespace"]
        problem = ph.bad_input(spec, f"{ns}/{patj['metadata']['name']}")
        if problem is not None:  # fail before any pod runs: a typo must not cost an estimate
            step.events.append(ph.transition(step.status, Phase.failed, "BadInput", problem))
            return
        if self.worker_identity_missing(ns):
            step.events.append(ph.transition(step.status, Phase.failed, "NoWorkerIdentity",
                                             ph.no_worker_identity(
                                                 ns, self.settings.worker_service_account)))
            return
        self._create("v1", "configmaps", mf.progress_configmap(patj))
        step.status.started_at = now_rfc3339()
        step.events.append(ph.transition(step.status, Phase.estimating, "Started",
                                         "estimating the batch-size efficiency vector"))

    def _estimating(self, patj: Obj, spec: PowerAwareTrainingJobSpec, step: Step) -> None:
        status, ns = step.status, patj["metadata"]["namespace"]
        key = efficiency_cache_key(spec, mf.weights_identity(spec))
        cm_name = mf.efficiency_configmap_name(key)
        job_name = mf.short_name(patj["metadata"]["name"], f"estimate-{status.attempts.estimate}")
        cm = self._configmap(ns, cm_name)
        if cm is not None and "efficiency.json" in (cm.get("data") or {}):
            job = self.kube.get_or_none(api_path("batch/v1", "jobs", ns, job_name))
            cached = job is None and status.efficiency is None
            status.efficiency = EfficiencyStatus(config_map=cm_name, key=key, cached=cached)
            how = "cache hit" if cached else "estimated"
            step.events.append(ph.transition(status, Phase.profiling, "EfficiencyReady",
                                             f"efficiency vector {cm_name} ({how})"))
            return
        status.efficiency = EfficiencyStatus(config_map=cm_name, key=key, cached=False)
        job = self.kube.get_or_none(api_path("batch/v1", "jobs", ns, job_name))
        if job is None:
            other = self._active_producer(ns, "jobs", key, patj)
            if other:
                status.message = f"waiting for {other}, which estimates the same vector"
                return
            inject = self._inject(patj, "estimate", status.attempts.estimate)
            body = mf.estimate_job(patj, spec, self.settings, key=key,
                                   attempt=status.attempts.estimate, inject=inject)
            if self._create("batch/v1", "jobs", body):
                status.attempts.next_retry_at = None
                step.events.append(("Normal", "EstimateStarted",
                                    f"job {job_name} on the GPU server"))
            status.message = f"estimating in job {job_name}"
            return
        outcome = ph.job_outcome(job, self._pods(ns, f"job-name={job_name}"))
        if outcome.state == "succeeded":
            outcome = ph.Outcome("failed", None, "NotPublished",
                                 f"job {job_name} finished without writing {cm_name}")
        if outcome.state == "failed":
            self._failed_attempt(step, "estimate", f"estimate job {job_name}", outcome)

    def _profile_status(
        self, patj: Obj, spec: PowerAwareTrainingJobSpec, cands: list[ph.Candidate]
    ) -> list[ProfileStatus]:
        out = []
        for cand in cands:
            key = mf.profile_key(spec, cand.device_model, cand.l4t)
            cut = spec.power_limit_watts if spec.strategy.profiling == "frontier" else None
            out.append(ProfileStatus(
                device_model=cand.device_model, node=cand.nodes[0], l4t=cand.l4t,
                config_map=mf.profile_configmap_name(key), key=key, power_limit_watts=cut,
            ))
        return out

    def _nodes(self) -> list[Obj]:
        return list(self.kube.get("/api/v1/nodes")["items"])

    def _candidates(self, spec: PowerAwareTrainingJobSpec, exclude: frozenset[str] = frozenset(),
                    ) -> list[ph.Candidate]:
        selector = {**self.settings.jetson_selector, **spec.placement.node_selector}
        return ph.candidates(self._nodes(), selector, exclude)

    def _profiling(self, patj: Obj, spec: PowerAwareTrainingJobSpec, step: Step) -> None:
        status, ns = step.status, patj["metadata"]["namespace"]
        cands = self._candidates(spec)
        if not cands:
            status.message = (
                "waiting: no Ready node matches spec.placement.nodeSelector"
                f" {spec.placement.node_selector} and {self.settings.jetson_selector}"
            )
            return
        wanted = self._profile_status(patj, spec, cands)
        known = {p.key: p for p in status.profiles}
        profiles, pending = [], []
        for prof in wanted:
            prev = known.get(prof.key)
            ds_name = mf.short_name(patj["metadata"]["name"],
                                    f"profile-{mf.label_value(prof.device_model)}")
            cm = self._configmap(ns, prof.config_map)
            if cm is not None and "profile.csv" in (cm.get("data") or {}):
                # Cached: it was there before this job waited for it.
                prof.cached = True if prev is None else bool(prev.cached)
                self._delete("apps/v1", "daemonsets", ns, ds_name)
                profiles.append(prof)
                continue
            prof.cached = None
            profiles.append(prof)
            pending.append((prof, ds_name))
        status.profiles = profiles
        for prof, ds_name in pending:
            ds = self.kube.get_or_none(api_path("apps/v1", "daemonsets", ns, ds_name))
            if ds is None:
                other = self._active_producer(ns, "daemonsets", prof.key, patj)
                if other:
                    status.message = f"waiting for {other}, which profiles the same LUT"
                    continue
                inject = self._inject(patj, "profile", status.attempts.profile)
                body = mf.profile_daemonset(patj, spec, self.settings,
                                            device_model=prof.device_model, node=prof.node,
                                            l4t=prof.l4t, key=prof.key, inject=inject)
                if self._create("apps/v1", "daemonsets", body):
                    status.attempts.next_retry_at = None
                    step.events.append(("Normal", "ProfilingStarted",
                                        f"{prof.device_model} on {prof.node} ({ds_name})"))
                continue
            pods = self._pods(ns, f"{LABEL_JOB}={mf.label_value(patj['metadata']['name'])},"
                                  f"{LABEL_PHASE}=profile,"
                                  f"{LABEL_DEVICE_MODEL}={mf.label_value(prof.device_model)}")
            failures, message = ph.daemonset_failures(pods)
            if failures > status.attempts.profile:
                outcome = ph.Outcome("failed", None, "ProfilingFailed", message)
                # The DaemonSet restarts the pod itself; the operator only counts and gives up.
                status.attempts.profile = failures - 1
                if self._failed_attempt(step, "profile", f"profiling {prof.device_model}",
                                        outcome):
                    self._delete("apps/v1", "daemonsets", ns, ds_name)
                    return
                status.attempts.next_retry_at = None  # the DaemonSet's own back-off applies
        if pending:
            status.message = "profiling " + ", ".join(p.device_model for p, _ in pending)
            return
        hits = sum(1 for p in profiles if p.cached)
        step.events.append(ph.transition(
            status, Phase.selecting, "ProfilesReady",
            f"{len(profiles)} profile(s), {hits} from the cache: "
            + ", ".join(f"{p.device_model}={p.config_map}" for p in profiles)))

    def _training_load(self) -> dict[str, int]:
        """Unfinished training Jobs per node (Jobs exist before their pods are scheduled)."""
        jobs = self.kube.get("/apis/batch/v1/jobs", labelSelector=f"{LABEL_PHASE}=train")
        load: dict[str, int] = {}
        for job in jobs["items"]:
            st = job.get("status") or {}
            if st.get("succeeded") or st.get("failed") or job["metadata"].get("deletionTimestamp"):
                continue
            pod = job["spec"]["template"]["spec"]
            node = (pod.get("nodeSelector") or {}).get("kubernetes.io/hostname")
            if node:
                load[node] = load.get(node, 0) + 1
        return load

    def _selecting(self, patj: Obj, spec: PowerAwareTrainingJobSpec, step: Step) -> None:
        status, ns = step.status, patj["metadata"]["namespace"]
        if status.efficiency is None or not status.profiles:
            step.events.append(ph.transition(status, Phase.estimating, "NoInputs",
                                             "efficiency or profiles missing in status"))
            return
        eff_cm = self._configmap(ns, status.efficiency.config_map)
        if eff_cm is None:
            status.efficiency = None
            step.events.append(ph.transition(status, Phase.estimating, "CacheMissing",
                                             "efficiency ConfigMap vanished; estimating again"))
            return
        efficiency = parse_efficiency_json(eff_cm["data"]["efficiency.json"],
                                           status.efficiency.config_map)
        lost = frozenset(status.training.nodes_lost if status.training else [])
        cands = {c.device_model: c for c in self._candidates(spec, lost)}
        luts = {}
        for prof in status.profiles:
            if prof.device_model not in cands:
                continue
            cm = self._configmap(ns, prof.config_map)
            if cm is None:
                step.events.append(ph.transition(status, Phase.profiling, "CacheMissing",
                                                 f"{prof.config_map} vanished; profiling again"))
                return
            luts[prof.device_model] = parse_profile_csv(cm["data"]["profile.csv"], prof.config_map)
        if not luts:
            step.events.append(ph.transition(
                status, Phase.failed, "NoCandidateNode",
                "no Ready candidate node is left" + (f" (lost: {sorted(lost)})" if lost else "")))
            return
        model, result, rows = ph.plan_candidates(spec, efficiency, luts)
        if model is None or result is None:
            step.events.append(ph.transition(
                status, Phase.failed, "Infeasible",
                "; ".join(f"{r.device_model}: {r.error}" for r in rows)))
            return
        ranked = [r.device_model for r in sorted(
            (r for r in rows if r.objective_value is not None),
            key=lambda r: r.objective_value or 0.0)]
        model, node = ph.place(ranked, {m: c.nodes for m, c in cands.items()},
                               self._training_load())
        if model != ranked[0]:
            result = ph.plan_for(spec, efficiency, luts[model])
        status.selection = SelectionStatus(
            node=node, device_model=model, batch_size=result.batch_size,
            gpu_frequency_hz=result.gpu_freq_hz,
            gpu_frequency_m_hz=round(result.gpu_freq_hz / 1e6),
            power_watts=result.power_w, power_limit_watts=spec.power_limit_watts,
            predicted_seconds=result.predicted_seconds, relative_time=result.relative_time,
            objective=spec.strategy.objective.value, baselines=ph.baselines(result),
            candidates=rows,
        )
        pred = ("" if result.predicted_seconds is None
                else f", predicted {result.predicted_seconds:.1f} s")
        step.events.append(ph.transition(
            status, Phase.training, "Planned",
            f"{model} on {node}: b={result.batch_size}, f={result.gpu_freq_hz / 1e6:.0f} MHz,"
            f" {result.power_w:.2f} W{pred}"))

    def _progress(self, ns: str, patj: Obj) -> tuple[TrainingEvent | None, TrainingEvent | None]:
        cm = self._configmap(ns, mf.progress_configmap_name(patj["metadata"]["name"]))
        data = (cm or {}).get("data") or {}
        progress = TrainingEvent.from_line(data.get(PROGRESS_KEY) or "")
        result = TrainingEvent.from_line(data.get(RESULT_KEY) or "")
        return progress, result

    def _apply_progress(self, training: TrainingStatus, event: TrainingEvent) -> None:
        training.samples = training.carried_samples + event.samples
        if event.accuracy is not None:
            training.accuracy = event.accuracy
        usage = event.usage
        if usage is not None:
            training.device_seconds = training.carried_device_seconds + usage.device_time_s
            if usage.energy_j is not None:
                training.energy_joules = training.carried_energy_joules + usage.energy_j
            if usage.peak_power_w is not None:
                training.peak_power_watts = max(training.peak_power_watts or 0.0,
                                                usage.peak_power_w)
            training.simulated = usage.simulated
        if event.device:
            training.device = event.device
        if event.precision:
            training.precision = event.precision
        if event.reached_target is not None:
            training.reached_target = event.reached_target

    def _annotate_progress(self, ns: str, pod: Obj, training: TrainingStatus) -> None:
        """Progress on the training pod, where the node agent exports it for the dashboards."""
        want = {ANNOTATION_TRAINING_SAMPLES: str(training.samples)}
        if training.accuracy is not None:
            want[ANNOTATION_TRAINING_ACCURACY] = f"{training.accuracy:.4f}"
        have = pod["metadata"].get("annotations") or {}
        if all(have.get(k) == v for k, v in want.items()):
            return
        try:
            self.kube.patch(api_path("v1", "pods", ns, pod["metadata"]["name"]),
                            {"metadata": {"annotations": want}}, "merge")
        except KubeApiError as exc:  # progress on the dashboard is not worth failing a job
            log.warning("%s/%s: progress annotation not written: %s", ns,
                        pod["metadata"]["name"], exc)

    def _stop_training(self, ns: str, training: TrainingStatus, progress: TrainingEvent | None,
                       new_batch: int | None) -> None:
        if training.job:
            self._delete("batch/v1", "jobs", ns, training.job)
        if progress is not None:
            self._apply_progress(training, progress)
        training.job = training.pod = None

    def _training(self, patj: Obj, spec: PowerAwareTrainingJobSpec, step: Step) -> None:
        status, ns = step.status, patj["metadata"]["namespace"]
        sel = status.selection
        if sel is None:  # status edited by hand, or lost: plan again
            step.events.append(ph.transition(status, Phase.selecting, "NoSelection",
                                             "no plan in status; planning"))
            return
        training = status.training or TrainingStatus()
        status.training = training
        progress, result = self._progress(ns, patj)
        # 1. The limit changed: re-plan (profiles cut at a higher limit still cover a lower one).
        if sel.power_limit_watts != spec.power_limit_watts:
            self._stop_training(ns, training, progress, None)
            training.segment += 1
            self._reset_progress(ns, patj)
            if ph.profiles_cover_limit(status.profiles, spec.power_limit_w):
                to, why = Phase.selecting, "re-planning from the existing profiles"
            else:
                to, why = Phase.profiling, "profiling up to the new limit"
            step.events.append(ph.transition(
                status, to, "PowerLimitChanged",
                f"power limit {sel.power_limit_watts} W → {spec.power_limit_watts} W; {why}"))
            return
        # 2. The node is gone or not Ready: choose another node, resume from the checkpoint.
        node = self.kube.get_or_none(api_path("v1", "nodes", name=sel.node))
        if node is None or not node_schedulable(node):
            self._stop_training(ns, training, progress, None)
            training.nodes_lost.append(sel.node)
            self._reset_progress(ns, patj)
            step.events.append(ph.transition(
                status, Phase.selecting, "NodeLost",
                f"node {sel.node} is {'gone' if node is None else 'not Ready'}; rescheduling"
                " from the last checkpoint"))
            return
        if training.job is None:
            ckpt = training.checkpoint_dir
            if not ckpt or not ckpt.endswith(f"-b{sel.batch_size}"):
                # The trainer's checkpoints are tied to b: a new b gets a new folder.
                ckpt = mf.checkpoint_dir(self.settings, patj,
                                         f"run{training.attempt + 1}-b{sel.batch_size}")
            carry = None
            if training.checkpoint_dir and training.checkpoint_dir != ckpt:
                carry = training.checkpoint_dir
                training.carried_samples = training.samples
                training.carried_device_seconds = training.device_seconds
                training.carried_energy_joules = training.energy_joules or 0.0
            training.attempt += 1
            inject = self._inject(patj, "train", status.attempts.train)
            body = mf.train_job(patj, spec, self.settings, node=sel.node,
                                batch_size=sel.batch_size, gpu_frequency_hz=sel.gpu_frequency_hz,
                                attempt=training.attempt, ckpt_dir=ckpt, carry_from=carry,
                                inject=inject)
            self._create("batch/v1", "jobs", body)
            training.job, training.node, training.checkpoint_dir = (
                body["metadata"]["name"], sel.node, ckpt)
            status.attempts.next_retry_at = None
            status.message = f"training in job {training.job} on {sel.node}"
            step.events.append(("Normal", "TrainingStarted",
                                f"job {training.job} on {sel.node} (b={sel.batch_size},"
                                f" f={sel.gpu_frequency_hz / 1e6:.0f} MHz)"))
            return
        job = self.kube.get_or_none(api_path("batch/v1", "jobs", ns, training.job))
        if job is None:
            training.job = None  # deleted under us: start it again (resumes from the checkpoint)
            return
        pods = self._pods(ns, f"job-name={training.job}")
        newest = max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)
        if newest is not None:
            training.pod = newest["metadata"]["name"]
        if progress is not None:
            self._apply_progress(training, progress)
            if newest is not None:
                self._annotate_progress(ns, newest, training)
        outcome = ph.job_outcome(job, pods)
        if outcome.state == "running":
            return
        if result is not None:
            self._apply_progress(training, result)
        if outcome.state == "succeeded":
            step.events.append(ph.transition(
                status, Phase.succeeded, "TargetReached",
                f"accuracy {training.accuracy or 0:.3f} after {training.samples} samples,"
                f" {training.device_seconds:.1f} s device time"
                + (" (simulated)" if training.simulated else "")))
            return
        if outcome.exit_code == ph.EXIT_BUDGET:
            step.events.append(ph.transition(
                status, Phase.failed, "BudgetExhausted",
                f"sample budget {spec.budget.train_samples} spent at accuracy"
                f" {training.accuracy or 0:.3f} (target {spec.target_accuracy})"))
            return
        if not self._failed_attempt(step, "train", f"training job {training.job}", outcome):
            self._delete("batch/v1", "jobs", ns, training.job)
            training.job = None

    def _reset_progress(self, ns: str, patj: Obj) -> None:
        name = mf.progress_configmap_name(patj["metadata"]["name"])
        try:
            self.kube.patch(api_path("v1", "configmaps", ns, name),
                            {"data": {PROGRESS_KEY: None, RESULT_KEY: None}}, "merge")
        except KubeApiError as exc:
            if exc.code != 404:
                raise
