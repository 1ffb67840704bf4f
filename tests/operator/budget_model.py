"""A model of one budgeted site for the stateful check of issue 39 (test_budget_model.py).

The actors are the real pure decisions, each run on the view it would have: the budget loop
(`decide_budget`, on an index that trails the jobs and on the pods read fresh), the jobs'
reconciles (`decide`, on a body that may be several versions old), the node agent's parser of a
pod's limit, and the cluster's own moves (the Job and DaemonSet controllers starting pods, pods
ending, a training that completes, a profile published, an edited cap). The model keeps what is
true (every job's stored versions, the budget's record, the workloads and pods) and from it the
invariant's left-hand side, computed without the budget's own bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edgetrain.api.budget import (
    ANNOTATION_POWER_ALLOCATION,
    LabelSelector,
    PowerBudgetSpec,
    PowerBudgetStatus,
    parse_allocation,
)
from edgetrain.api.job_status import Phase, PowerAwareTrainingJobStatus
from edgetrain.api.keys import LABEL_CACHE_KEY
from edgetrain.api.profile import parse_profile_csv
from edgetrain.node_agent.logic import pod_request
from edgetrain.operator import decide as dc
from edgetrain.operator import world as wd
from edgetrain.operator.budget import BudgetJob, decide_budget, job_node
from edgetrain.operator.grants import Rules, pod_limits
from edgetrain.operator.handlers import merge_diff
from edgetrain.operator.phases import NodeInfo
from edgetrain.operator.reconcile import commits_power
from edgetrain.planner import Lut
from edgetrain.planner.budget import job_options
from tests.operator.test_decide import (
    CACHE,
    EFF,
    EFF_CM,
    EFF_JSON,
    NOW,
    PROF_CM,
    PROF_CSV,
    SETTINGS,
    SPEC,
)

BUDGET = "farm"
IDLE_W = 1.17  # a Nano's idle board draw (the twin's board facts)
NODES = ("n1", "n2", "n3")
# 10.5 W: two jobs fit only at 4.5 W each (one at 4.9 W must be lowered); 10.6 W: 4.9 + 4.5 W,
# with two equally good ways to give them; 13 W: three jobs.
CAPS_W = (10.5, 10.6, 13.0)
SITE = LabelSelector.model_validate({"matchLabels": {"site": BUDGET}})
NODE_INFOS = tuple(NodeInfo(n, tuple(sorted({
    "edgetrain.io/device-model": "jetson-nano", "edgetrain.io/node-kind": "jetson",
    "edgetrain.io/l4t": "36.4", "site": BUDGET, "kubernetes.io/hostname": n}.items())), True)
    for n in NODES)
EPS_W = 1e-6


@dataclass(frozen=True)
class Switches:
    """What the I/O around the pure functions does (on in the operator; the check turns each
    off in turn): status writes on the version read, and a worker's grant stored before it
    exists."""

    preconditions: bool = True
    commit_first: bool = True


@dataclass
class Patj:
    """A job as the API server stores it: every version (annotation, status) it has had."""

    name: str
    uid: str
    created: str
    versions: list[tuple[str | None, PowerAwareTrainingJobStatus]] = field(default_factory=list)

    @property
    def version(self) -> int:
        return len(self.versions) - 1

    @property
    def annotation(self) -> str | None:
        return self.versions[-1][0]

    @property
    def status(self) -> PowerAwareTrainingJobStatus:
        return self.versions[-1][1]

    def write(self, annotation: str | None, status: PowerAwareTrainingJobStatus) -> None:
        self.versions.append((annotation, status.model_copy(deep=True)))


@dataclass
class Workload:
    """A training Job or profiling DaemonSet: where its pods run and at what limit."""

    name: str
    plural: str
    owner: str
    node: str
    body: dict[str, Any]
    deleting: bool = False
    succeeded: bool = False


@dataclass
class Pod:
    name: str
    owner: str  # the workload
    node: str
    annotations: dict[str, str]
    labels: dict[str, str]
    terminating: bool = False
    succeeded: bool = False

    def obj(self) -> dict[str, Any]:
        phase = "Succeeded" if self.succeeded else "Running"
        return {"metadata": {"name": self.name, "namespace": "ns", "uid": self.name,
                             "creationTimestamp": "t", "labels": self.labels,
                             "annotations": self.annotations},
                "spec": {"nodeName": self.node},
                "status": {"phase": phase, "containerStatuses": [{"state": {"running": {}}}]}}


def _merged(doc: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch applied (RFC 7386), as the API server applies the operator's."""
    out = dict(doc)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _template_node(body: dict[str, Any]) -> str:
    pod = body["spec"]["template"]["spec"]
    if "kubernetes.io/hostname" in pod.get("nodeSelector", {}):
        return str(pod["nodeSelector"]["kubernetes.io/hostname"])
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    for expr in terms["nodeSelectorTerms"][0]["matchExpressions"]:
        if expr["key"] == "kubernetes.io/hostname":
            return str(expr["values"][0])
    raise AssertionError(f"no node in {body['metadata']['name']}")


def _limit(annotations: dict[str, str]) -> float | None:
    """A pod's limit as the node agent reads it."""
    req = pod_request({"metadata": {"name": "p", "namespace": "ns", "annotations": annotations},
                       "status": {"phase": "Running"}}, [])
    return None if req is None else req.power_limit_w


class SiteModel:
    """The site's true state and the actors' moves (see the module docstring)."""

    def __init__(self, rules: Rules, switches: Switches, profiled: bool = False) -> None:
        self.rules, self.switches = rules, switches
        self.cap_w = CAPS_W[0]
        self.bound_w = self.cap_w
        self.last_w = 0.0
        self.patjs: dict[str, Patj] = {}
        self.budget = PowerBudgetStatus()
        self.budget_seen: dict[str, int] = {}
        self.notices: dict[str, str] = {}
        self.workloads: dict[str, Workload] = {}
        self.pods: dict[str, Pod] = {}
        self.configmaps: dict[str, dict[str, str]] = {EFF_CM: {"efficiency.json": EFF_JSON}}
        if profiled:  # the profile is cached already: jobs go straight to their shares
            self.configmaps[PROF_CM] = {"profile.csv": PROF_CSV}
        self.swaps: list[str] = []
        # running job → (the grant it was lowered from, the jobs below that grant then)
        self.lowered: dict[str, tuple[float, set[str]]] = {}

    # --- the cluster's moves ---

    def arrive(self) -> str:
        i = len(self.patjs) + 1
        name = f"j{i}"
        job = Patj(name, f"uid-{name}-0000000", f"2026-01-01T00:00:0{i}Z")
        job.write(None, PowerAwareTrainingJobStatus(phase=Phase.profiling, efficiency=EFF))
        self.patjs[name] = job
        return name

    def edit_cap(self, cap_w: float) -> None:
        if cap_w < self.cap_w:
            self.bound_w = max(self.bound_w, self.cap_w)  # the jobs must lower first
        self.cap_w = cap_w

    def deliver(self, name: str) -> None:
        """The budget's notice lands on the job (a merge patch of its annotation)."""
        text = self.notices.pop(name, None)
        if text is not None and text != self.patjs[name].annotation:
            self.patjs[name].write(text, self.patjs[name].status)

    def start_pod(self, workload: str) -> None:
        """The Job or DaemonSet controller starts the workload's pod."""
        w = self.workloads[workload]
        if w.deleting or w.succeeded or any(p.owner == workload for p in self.pods.values()):
            return
        meta = w.body["spec"]["template"]["metadata"]
        labels = {**meta.get("labels", {})}
        if w.plural == "jobs":
            labels["job-name"] = w.name
        self.pods[f"{workload}-pod"] = Pod(f"{workload}-pod", workload, w.node,
                                           dict(meta.get("annotations") or {}), labels)

    def end_pod(self, pod: str) -> None:
        """A terminating pod is gone; a Job deleted in the foreground goes with its last pod."""
        p = self.pods[pod]
        if not p.terminating:
            return
        del self.pods[pod]
        w = self.workloads.get(p.owner)
        if w is not None and w.deleting and not any(q.owner == w.name
                                                     for q in self.pods.values()):
            del self.workloads[w.name]

    def finish(self, workload: str) -> None:
        """A training pod reaches its target: the pod and its Job succeed."""
        w = self.workloads[workload]
        pod = self.pods.get(f"{workload}-pod")
        if w.plural != "jobs" or w.deleting or pod is None or pod.terminating:
            return
        pod.succeeded = w.succeeded = True

    def publish_profile(self, workload: str) -> None:
        """A running profiling pod publishes its profile."""
        w = self.workloads[workload]
        if w.plural == "daemonsets" and f"{workload}-pod" in self.pods:
            self.configmaps[PROF_CM] = {"profile.csv": PROF_CSV}

    # --- the budget loop ---

    def budget_step(self, lags: dict[str, int]) -> None:
        """One allocation on an index `lags` versions behind each job (never behind what it
        saw before), then the pods read fresh, as the handler reads them."""
        jobs: list[BudgetJob] = []
        for name, job in self.patjs.items():
            seen = self.budget_seen.get(name, 0)
            v = max(seen, job.version - lags.get(name, 0))
            self.budget_seen[name] = v
            annotation, st = job.versions[v]
            share = st.power_share
            if share is None:
                continue
            training = st.phase is Phase.training and st.selection is not None
            jobs.append(BudgetJob(
                namespace="ns", name=name, phase=st.phase,
                node=job_node(BUDGET, share.node, annotation,
                              st.selection.node if training and st.selection else None),
                own_limit_w=SPEC.power_limit_w, created=job.created, annotation=annotation,
                acknowledged=share.sequence, purpose=share.purpose,
                options=self._options(name, st) if share.purpose == "train" else None,
                device_model=share.device_model))
        pods = pod_limits([p.obj() for p in self.pods.values()], NODES)
        spec = PowerBudgetSpec(node_selector=SITE, cap_watts=self.cap_w)
        before = {a.name: a.watts for a in self.budget.allocations}
        decision = decide_budget(
            BUDGET, spec, self.budget, generation=1, seconds_of_day=0.0, nodes=NODE_INFOS,
            node_idle_w={n: IDLE_W for n in NODES}, others={BUDGET: SITE}, jobs=jobs,
            pods=pods, rules=self.rules)
        self.budget = decision.status
        for write in decision.writes:
            self.notices[write.name] = write.text
        self._note_swaps(before, jobs)

    def _options(self, name: str, st: PowerAwareTrainingJobStatus) -> Any:
        if PROF_CM not in self.configmaps:
            return None
        lut = Lut.from_points(parse_profile_csv(PROF_CSV, PROF_CM))
        from edgetrain.api.efficiency import parse_efficiency_json

        return job_options(f"ns/{name}", lut, parse_efficiency_json(EFF_JSON, EFF_CM),
                           limit_w=SPEC.power_limit_w)

    def _note_swaps(self, before: dict[str, float | None], jobs: list[BudgetJob]) -> None:
        """An equal-merit swap: a running job lowered from `old` while another job, below
        `old` then, is granted exactly `old` (every job here has the same points, so the mirror
        split, which stops nobody, was as good). A job that kept `old` is no swap: someone had
        to give way."""
        after = {a.name: a.watts for a in self.budget.allocations}
        running = {j.name for j in jobs if j.phase is Phase.training and j.purpose == "train"}
        for name in running:
            old, new = before.get(name), after.get(name)
            if old is not None and new is not None and new < old - EPS_W:
                below = {k for k, w in before.items() if k != name and (w or 0.0) < old - EPS_W}
                self.lowered[name] = (old, below | (set(self.patjs) - set(before)))
        for name, (old, below) in list(self.lowered.items()):
            mine = after.get(name)
            if mine is None or mine >= old - EPS_W or self.patjs[name].status.phase.final:
                del self.lowered[name]
                continue
            for other in below:
                w = after.get(other)
                if w is not None and abs(w - old) <= EPS_W:
                    self.swaps.append(f"{name} was lowered from {old} W to {mine} W and"
                                      f" {other} was granted {old} W")

    # --- a job's reconcile ---

    def reconcile(self, name: str, lag: int) -> None:
        """One step of `decide` on a body `lag` versions old, carried out as the operator
        carries it out (reconcile.py, handlers.py)."""
        job = self.patjs[name]
        v = max(0, job.version - lag)
        annotation, st = job.versions[v]
        decision = dc.decide(SPEC, st, self._world(name, annotation), SETTINGS)
        # With a budget on the site every write is on the version read (handlers.py).
        refused = v != job.version and self.switches.preconditions
        if self.switches.commit_first and commits_power(decision):
            if refused:
                return  # 409: read again, decide again
            self._store(job, st, decision.status)
            self._execute(name, decision.actions)
            return
        self._execute(name, decision.actions)
        if decision.status != st and not refused:
            self._store(job, st, decision.status)

    @staticmethod
    def _store(job: Patj, before: PowerAwareTrainingJobStatus,
               after: PowerAwareTrainingJobStatus) -> None:
        """The status write: a merge patch of what the decision changed, onto what is stored."""
        stored = _merged(job.status.wire(), merge_diff(before.wire(), after.wire()))
        job.write(job.annotation, PowerAwareTrainingJobStatus.model_validate(stored))

    def _world(self, name: str, annotation: str | None) -> wd.World:
        job = self.patjs[name]
        meta = {"name": name, "namespace": "ns", "uid": job.uid, "generation": 1,
                "annotations": {} if annotation is None
                else {ANNOTATION_POWER_ALLOCATION: annotation}}
        mine = {w.name: w for w in self.workloads.values() if w.owner == name}
        jobs = {n: {**w.body, "status": {"succeeded": 1} if w.succeeded else {"active": 1}}
                for n, w in mine.items() if w.plural == "jobs"}
        daemonsets = {n: w.body for n, w in mine.items() if w.plural == "daemonsets"}
        pods = tuple(p.obj() for p in self.pods.values() if p.owner in mine)
        producers: dict[str, tuple[wd.Producer, ...]] = {}
        for w in self.workloads.values():
            if w.plural == "daemonsets" and w.owner != name:
                key = w.body["metadata"]["labels"][LABEL_CACHE_KEY]
                owner = self.patjs[w.owner].uid
                producers[key] = (*producers.get(key, ()), wd.Producer(owner, f"ds {w.name}"))
        return wd.World(job={"metadata": meta}, now_s=NOW, nodes=NODE_INFOS,
                        budgets={BUDGET: SITE},
                        configmaps={**CACHE, **self.configmaps} if PROF_CM in self.configmaps
                        else dict(self.configmaps),
                        jobs=jobs, daemonsets=daemonsets, pods=pods, producers=producers)

    def _execute(self, owner: str, actions: list[wd.Action]) -> None:
        for action in actions:
            if isinstance(action, wd.Create) and action.plural in ("jobs", "daemonsets"):
                name = action.body["metadata"]["name"]
                if name not in self.workloads:  # 409: it exists
                    self.workloads[name] = Workload(name, action.plural, owner,
                                                    _template_node(action.body), action.body)
            elif isinstance(action, wd.Delete) and action.plural in ("jobs", "daemonsets"):
                w = self.workloads.get(action.name)
                if w is None:
                    continue
                w.deleting = True
                for pod in self.pods.values():
                    if pod.owner == w.name:
                        pod.terminating = True
                if not action.foreground or not any(p.owner == w.name
                                                    for p in self.pods.values()):
                    del self.workloads[w.name]

    def settle(self, name: str) -> None:
        """The job moves as far as it can on fresh views (its notice landed, its pods started):
        a shortcut through the many steps that need no interleaving, so the search reaches the
        states where interleavings matter."""
        for _ in range(6):
            self.deliver(name)
            self.reconcile(name, 0)
            for w in [w for w, x in self.workloads.items() if x.owner == name]:
                self.start_pod(w)
            self.check()

    # --- what is true ---

    def authorised(self) -> dict[str, float]:
        """Per node, the highest limit anything there may still act on, from the truth: pods
        that have not ended, workloads that may still start one, each job's stored plan or
        sweep, the grant notified on it and the one the budget recorded for it."""
        out = {n: IDLE_W for n in NODES}

        def count(node: str, watts: float | None) -> None:
            if watts is not None and node in out:
                out[node] = max(out[node], watts)

        for pod in self.pods.values():
            if not pod.succeeded:
                count(pod.node, _limit(pod.annotations))
        for w in self.workloads.values():
            if not w.deleting and not w.succeeded:
                count(w.node, _limit(w.body["spec"]["template"]["metadata"].get(
                    "annotations") or {}))
        records = {a.name: a for a in self.budget.allocations}
        for name, job in self.patjs.items():
            st = job.status
            if st.phase.final:
                continue
            share, sel = st.power_share, st.selection
            if st.phase is Phase.training and sel is not None:
                count(sel.node, sel.power_limit_watts)
            if st.phase is Phase.profiling and share is not None and share.purpose == "profile":
                count(share.node, share.watts)
            notice = parse_allocation(job.annotation)
            if notice is not None and notice.watts is not None:
                count(notice.node, notice.watts)
            rec = records.get(name)
            if rec is not None and rec.watts is not None:
                count(rec.node, rec.watts)
        return out

    def check(self) -> None:
        """The promise: the authorised sum stays within the cap; after the cap was lowered it
        may only fall until it is within the new one."""
        total = sum(self.authorised().values())
        if total <= self.cap_w + EPS_W:
            self.bound_w = self.cap_w
        else:
            assert total <= self.bound_w + EPS_W and total <= self.last_w + EPS_W, (
                f"authorised {total:.3f} W over the cap {self.cap_w} W: {self.authorised()}")
        self.last_w = total

    def all_final(self) -> bool:
        return all(j.status.phase.final for j in self.patjs.values())

    def run_fairly(self, rounds: int = 400) -> None:
        """Every actor in turn on fresh views until every job has ended (liveness)."""
        for _ in range(rounds):
            if self.all_final():
                return
            self.budget_step({})
            self.check()
            for name in list(self.patjs):
                self.deliver(name)
                self.check()
                self.reconcile(name, 0)
                self.check()
            for w in list(self.workloads):
                if w in self.workloads:
                    self.start_pod(w)
                    self.publish_profile(w)
                    self.finish(w)
                    self.check()
            for p in [p for p, pod in self.pods.items() if pod.terminating]:
                self.end_pod(p)
                self.check()
        raise AssertionError("jobs never ended: " + ", ".join(
            f"{n} {j.status.phase.value}: {j.status.message}" for n, j in self.patjs.items()))

