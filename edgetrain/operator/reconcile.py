"""The I/O shell around `decide`: gather one job's world, carry out the actions.

Cluster-wide facts come from watches: the nodes from the fleet watch (`fleet.py`), training
Jobs per node, cache ConfigMaps and other jobs' producers from kopf indexes (`handlers.py`), so
a tick lists nothing cluster-wide. A job's own objects are read by name or by its label, fresh
from the API server (an index may lag a create by a moment, and a decision on a Job that seems
missing would start it twice), except in Training: there the training Job, its pods and the
progress ConfigMap come from watches (`informer.py`) where they show them, and a decision on
that view that does more than record progress is taken again on reads (`decide.records_only`).
Every action is idempotent: 409 on create and 404 on delete are success, and so is 409 on a
keyed Event (`world.PostEvent`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from edgetrain.api.budget import LabelSelector
from edgetrain.api.job import PowerAwareTrainingJobSpec, efficiency_cache_key
from edgetrain.api.job_status import Phase, PowerAwareTrainingJobStatus, fit_string
from edgetrain.api.keys import LABEL_JOB, LABEL_PHASE
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path, now_rfc3339
from edgetrain.operator import decide as dc
from edgetrain.operator import estimate_manifests as em
from edgetrain.operator import estimate_parts as ep
from edgetrain.operator import manifests as mf
from edgetrain.operator import world as wd
from edgetrain.operator.history import history_configmap_name, spec_history_key
from edgetrain.operator.informer import TrainingView
from edgetrain.operator.phases import NodeInfo, candidates, job_finished, sweep_spec
from edgetrain.operator.roles import node_role
from edgetrain.operator.settings import OperatorSettings

log = logging.getLogger("edgetrain.operator")
V = TypeVar("V")
_WORKLOADS = ("jobs", "daemonsets")
# How long one snapshot of the fleet serves reconciles: far below a node's NotReady grace, and
# the index itself trails the API server by about as much.
FLEET_SNAPSHOT_S = 0.5
# How long one read of the GPU servers serves estimate starts: a burst of new jobs reads them
# once, not once each (they change rarely; a server added is seen within this).
SERVERS_SNAPSHOT_S = 5.0

# kopf's Index is a Mapping of key → Store (an iterable of the values of every indexed object).
IndexView = Mapping[Any, Iterable[V]]


@dataclass(frozen=True)
class Indexes:
    """The kopf indexes a reconcile reads (empty mappings where an index is not wanted)."""

    nodes: IndexView[NodeInfo] = field(default_factory=dict)  # node name → its info
    training: IndexView[str] = field(default_factory=dict)  # node → unfinished training Jobs
    cache: IndexView[Mapping[str, str]] = field(default_factory=dict)  # (ns, ConfigMap) → data
    # (ns, cache key) → another job's estimate Job / profiling DaemonSet still making it
    estimators: IndexView[wd.Producer] = field(default_factory=dict)
    profilers: IndexView[wd.Producer] = field(default_factory=dict)
    # PowerBudget name → its node selector
    budgets: IndexView[LabelSelector] = field(default_factory=dict)
    # PowerBudget name → jobs holding or asking for a share (anything with `.node`, `.name`,
    # `.namespace`, `.phase`): a node a job waits for power on is taken, like one it trains on
    budget_jobs: IndexView[Any] = field(default_factory=dict)
    # Training Jobs, their pods and progress ConfigMaps from watches (None: read them all)
    training_objects: TrainingView | None = None


def _values(index: IndexView[V], key: Any) -> list[V]:
    return _retry(lambda: list(index.get(key, ())))


def _all_values(index: IndexView[V]) -> list[V]:
    return _retry(lambda: [v for store in list(index.values()) for v in store])


def _retry(read: Callable[[], list[V]]) -> list[V]:
    """kopf updates indexes on its event loop while handlers read them in worker threads: a read
    that meets a resize is simply repeated."""
    for _ in range(10):
        try:
            return read()
        except RuntimeError:  # "dictionary changed size during iteration"
            time.sleep(0.001)
    return read()


def owned_by(objs: Mapping[str, Obj], owners: set[str]) -> dict[str, Obj]:
    """The objects whose controller is one of `owners` (uids)."""
    return {k: o for k, o in objs.items() if mf.controller_uid(o) in owners}


def uids_of(objs: Mapping[str, Obj]) -> set[str]:
    """The uids of `objs`."""
    return {str(o["metadata"].get("uid")) for o in objs.values()}


@dataclass
class Step:
    """What one reconcile call decided: the status to write and the Events to post.
    `conflict`: a power commit met a newer object; nothing of that decision was done."""

    status: PowerAwareTrainingJobStatus
    events: list[wd.PostEvent] = field(default_factory=list)
    conflict: bool = False


# Writes the status as decided so far, on the version the reconcile read; False: the object
# changed since (a new grant, another replica), so the decision must be taken again.
Commit = Callable[[PowerAwareTrainingJobStatus], bool]


def commits_power(decision: wd.Decision) -> bool:
    """The decision starts a worker under a site budget's grant: its echo of the grant must be
    stored (on the version it was decided from) before the worker exists."""
    return decision.status.power_share is not None and any(
        isinstance(a, wd.Create) and a.plural in _WORKLOADS for a in decision.actions)


class Reconciler:
    """Reconciles jobs with one API client and the operator settings."""

    def __init__(self, client: KubeClient, settings: OperatorSettings) -> None:
        self.kube = client
        self.settings = settings
        self._identities: set[str] = set()  # namespaces seen with the worker ServiceAccount
        self._fleet_lock = threading.Lock()
        self._fleet: tuple[object, float, tuple[NodeInfo, ...]] = (None, 0.0, ())
        self._servers_read: tuple[float, tuple[NodeInfo, ...]] | None = None

    # --- gathering ---

    def world(self, patj: Obj, status: PowerAwareTrainingJobStatus,
              spec: PowerAwareTrainingJobSpec | str, indexes: Indexes,
              entered: bool = False, fresh: bool = False) -> wd.World:
        """Everything `decide` needs for the job's current phase, and nothing else. `entered`:
        EstimatingEfficiency began in this reconcile, so it has made no Job yet (a leftover from
        before a restart answers the create with 409, which counts as success). Profiling still
        reads its DaemonSets: a leftover one must be deleted once its profile is published.
        `fresh`: Training reads its own objects from the API server, not from the watches."""
        meta = patj["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], str(meta.get("uid") or "")
        job = {"metadata": {k: meta.get(k) for k in
                            ("name", "namespace", "uid", "generation", "annotations")}}
        phase = status.phase
        nodes: tuple[NodeInfo, ...] = ()
        if phase in (Phase.profiling, Phase.selecting):
            nodes = self.fleet(indexes)
        elif phase is Phase.training and status.selection is not None:
            nodes = tuple(_values(indexes.nodes, status.selection.node))
        elif phase is Phase.waiting_for_power and status.power_share is not None:
            nodes = tuple(_values(indexes.nodes, status.power_share.node))
        budgets: dict[str, LabelSelector] = {}
        if phase in (Phase.profiling, Phase.selecting, Phase.waiting_for_power,
                     Phase.training):
            budgets = dict(_retry(lambda: [(str(name), sel) for name, store in
                                           list(indexes.budgets.items()) for sel in store]))
        configmaps: dict[str, Mapping[str, str]] = {}
        producers: dict[str, tuple[wd.Producer, ...]] = {}
        jobs: dict[str, Obj] = {}
        daemonsets: dict[str, Obj] = {}
        pods: list[Obj] = []
        load: dict[str, int] = {}
        servers: tuple[NodeInfo, ...] = ()
        watched = False
        # The label narrows the list on the server; the owner's uid decides (the label value is
        # the name cut at 63 characters, which two jobs may share).
        mine = f"{LABEL_JOB}={mf.label_value(name)}"
        worker_identity: bool | None = None
        if phase is Phase.pending:
            worker_identity = self._worker_identity(ns)
        if isinstance(spec, str) or phase.final or phase is Phase.pending:
            pass
        elif phase is Phase.estimating:
            key = efficiency_cache_key(spec, mf.weights_identity(spec))
            cm = mf.efficiency_configmap_name(key)
            job_name = em.estimate_job_name(name, status.attempts.estimate)
            parts = ep.parts_configmap_name(job_name)
            configmaps.update(self._cache(indexes, ns, [cm, parts]))
            producers[key] = tuple(_values(indexes.estimators, (ns, key)))
            # The vector is published: the Job that made it no longer matters to the decision.
            if not entered and cm not in configmaps:
                jobs = owned_by(self._list("batch/v1", "jobs", ns,
                                           f"{mine},{LABEL_PHASE}=estimate"), {uid})
            if jobs:
                pods = list(owned_by(self._list("v1", "pods", ns,
                                                f"{mine},{LABEL_PHASE}=estimate"),
                                     uids_of(jobs)).values())
                if cm not in configmaps:
                    # The index may not show what a just-finished estimate published yet.
                    got = self.kube.get_or_none(api_path("v1", "configmaps", ns, cm))
                    if got is not None:
                        configmaps[cm] = dict(got.get("data") or {})
                current = jobs.get(job_name)
                if cm not in configmaps and current is not None and job_finished(current):
                    # Its last part may be newer than the index: read them fresh, once.
                    got = self.kube.get_or_none(api_path("v1", "configmaps", ns, parts))
                    if got is not None:
                        configmaps[parts] = dict(got.get("data") or {})
            retry_at = status.attempts.next_retry_at
            if (cm not in configmaps and job_name not in jobs and (retry_at or 0) <= time.time()
                    and all(p.owner == uid for p in producers[key])):
                servers = self._servers()  # an estimate Job is about to be made
        elif phase is Phase.profiling:
            keys = [mf.profile_key(sweep_spec(spec, status, c.device_model), c.device_model,
                                   c.l4t)
                    for c in candidates(nodes, self.settings.jetson_selector)]
            configmaps.update(self._cache(indexes, ns, [mf.profile_configmap_name(k)
                                                        for k in keys]))
            producers.update({k: tuple(_values(indexes.profilers, (ns, k))) for k in keys})
            daemonsets = owned_by(self._list("apps/v1", "daemonsets", ns,
                                             f"{mine},{LABEL_PHASE}=profile"), {uid})
            if daemonsets:
                pods = list(owned_by(self._list("v1", "pods", ns,
                                                f"{mine},{LABEL_PHASE}=profile"),
                                     uids_of(daemonsets)).values())
        elif phase is Phase.selecting:
            names = [p.config_map for p in status.profiles]
            if status.efficiency is not None:
                names.append(status.efficiency.config_map)
            if spec.strategy.learn_from_history:
                names.append(history_configmap_name(spec_history_key(spec)))
            configmaps.update(self._cache(indexes, ns, names, read_missing=True))
            # From the index's few entries (nodes that train), not a lookup per node of the fleet.
            # Not its own training Job: one being deleted for a re-plan must not push it away.
            own = f"{ns}/{mf.short_name(name, 'train-')}"
            load = dict(_retry(lambda: [(str(node), sum(1 for v in store if not
                                                        str(v).startswith(own)))
                                        for node, store in list(indexes.training.items())]))
            for rec in _all_values(indexes.budget_jobs):
                if (rec.namespace, rec.name) != (ns, name) and rec.phase == \
                        Phase.waiting_for_power.value:
                    load[rec.node] = load.get(rec.node, 0) + 1
        elif phase is Phase.training:
            training_job = status.training.job if status.training is not None else None
            view = None if fresh else indexes.training_objects
            jobs, pods, configmaps, watched = self._training(ns, name, uid, training_job, view)
        return wd.World(job=job, now_s=time.time(), nodes=nodes, servers=servers,
                        training_load=load,
                        configmaps=configmaps, jobs=jobs, daemonsets=daemonsets,
                        pods=tuple(pods), producers=producers, worker_identity=worker_identity,
                        budgets=budgets,
                        worker_events=self._refusals(ns, {**jobs, **daemonsets}, pods),
                        watched=watched)

    def _training(self, ns: str, name: str, uid: str, training_job: str | None,
                  view: TrainingView | None,
                  ) -> tuple[dict[str, Obj], list[Obj], dict[str, Mapping[str, str]], bool]:
        """The training Job, its pods and the progress ConfigMap's data: from the watches where
        they show them, else read by name (just created, or the watch not listed yet); and
        whether any came from the watches. Read in this order because the trainer publishes its
        result before it exits: a Job read as finished is followed by a ConfigMap that has it."""
        watched = False
        jobs: dict[str, Obj] = {}
        pods: list[Obj] = []
        if training_job:
            job = view.job(ns, training_job, uid) if view is not None else None
            if job is not None:
                watched = True
            else:
                job = self.kube.get_or_none(api_path("batch/v1", "jobs", ns, training_job))
            if job is not None:
                jobs[training_job] = job
                pods = view.pods(ns, str(job["metadata"].get("uid"))) if view is not None else []
                if pods:
                    watched = True
                else:  # no pod yet, or the pod watch has not shown it: ask
                    pods = list(self._list("v1", "pods", ns, f"job-name={training_job}")
                                .values())
        progress = mf.progress_configmap_name(name)
        got = view.configmap(ns, progress, uid) if view is not None else None
        if got is not None:
            watched = True
        else:
            got = self.kube.get_or_none(api_path("v1", "configmaps", ns, progress))
        configmaps: dict[str, Mapping[str, str]] = {}
        if got is not None:
            configmaps[progress] = dict(got.get("data") or {})
        return jobs, pods, configmaps, watched

    def fleet(self, indexes: Indexes) -> tuple[NodeInfo, ...]:
        """The Jetson nodes from the index, as one snapshot shared by the reconciles of the next
        `FLEET_SNAPSHOT_S` (a burst of jobs then groups a large fleet once, not once per job)."""
        now = time.monotonic()
        with self._fleet_lock:
            index, taken, nodes = self._fleet
            if index is not indexes.nodes or now - taken > FLEET_SNAPSHOT_S:
                nodes = tuple(_all_values(indexes.nodes))
                self._fleet = (indexes.nodes, now, nodes)
            return nodes

    def _servers(self) -> tuple[NodeInfo, ...]:
        """The GPU servers (serverSelector), read when an estimate is about to start, once per
        `SERVERS_SNAPSHOT_S`: not a watch, since they change rarely and only an estimate's start
        looks at them."""
        now = time.monotonic()
        with self._fleet_lock:
            read = self._servers_read
        if read is not None and now - read[0] <= SERVERS_SNAPSHOT_S:
            return read[1]
        selector = ",".join(f"{k}={v}" for k, v in sorted(self.settings.server_selector.items()))
        items = self.kube.get(api_path("v1", "nodes"), labelSelector=selector)["items"]
        # The selector may be empty (any node): only what `roles` takes as a server counts.
        servers = tuple(n for n in map(NodeInfo.of, items)
                        if node_role(n, self.settings).kind == "server")
        with self._fleet_lock:
            self._servers_read = (now, servers)
        return servers

    def _worker_identity(self, ns: str) -> bool:
        """`ns` has the worker ServiceAccount (remembered once seen, for this operator run)."""
        if ns not in self._identities:
            sa = self.settings.worker_service_account
            if self.kube.get_or_none(api_path("v1", "serviceaccounts", ns, sa)) is None:
                return False
            self._identities.add(ns)
        return True

    def _cache(self, indexes: Indexes, ns: str, names: list[str], read_missing: bool = False,
               ) -> dict[str, Mapping[str, str]]:
        """Cache ConfigMaps' data from the index; `read_missing`: what it lacks, by name (the
        index may not show what was published a moment ago, and a phase that needs it would
        go back to making it again)."""
        out: dict[str, Mapping[str, str]] = {}
        for cm in names:
            found = _values(indexes.cache, (ns, cm))
            if found:
                out[cm] = found[0]
            elif read_missing:
                got = self.kube.get_or_none(api_path("v1", "configmaps", ns, cm))
                if got is not None:
                    out[cm] = dict(got.get("data") or {})
        return out

    def _refusals(self, ns: str, workloads: Mapping[str, Obj], pods: list[Obj]
                  ) -> dict[str, tuple[Obj, ...]]:
        """FailedCreate Events of each unfinished worker that has no pod (a pod refused at
        admission exists nowhere else); workers with pods cost no read."""
        owners = {ref.get("uid") for p in pods
                  for ref in p["metadata"].get("ownerReferences") or []}
        out: dict[str, tuple[Obj, ...]] = {}
        for name, obj in workloads.items():
            uid = obj["metadata"].get("uid")
            done = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                       for c in (obj.get("status") or {}).get("conditions") or [])
            if not uid or uid in owners or done:
                continue
            items = self.kube.get(api_path("v1", "events", ns), fieldSelector=(
                f"involvedObject.uid={uid},reason=FailedCreate"))["items"]
            out[name] = tuple(items)
        return out

    def _list(self, api_version: str, plural: str, ns: str, selector: str) -> dict[str, Obj]:
        items = self.kube.get(api_path(api_version, plural, ns), labelSelector=selector)["items"]
        return {o["metadata"]["name"]: o for o in items}

    # --- acting ---

    def execute(self, actions: Iterable[wd.Action], patj: Obj) -> None:
        """Carry out the actions in order, keyed Events on the job `patj` among them (the others
        are the caller's: kopf posts them after the status write)."""
        for action in actions:
            if isinstance(action, wd.PostEvent):
                if action.key is not None:
                    self.post_event(patj, action)
            elif isinstance(action, wd.Create):
                ns = action.body["metadata"].get("namespace")
                try:
                    self.kube.create(api_path(action.api_version, action.plural, ns), action.body)
                except KubeApiError as exc:
                    if exc.code != 409:
                        raise
            elif isinstance(action, wd.Delete):
                try:
                    self.kube.delete(api_path(action.api_version, action.plural,
                                              action.namespace, action.name),
                                     {"propagationPolicy": "Foreground" if action.foreground
                                      else "Background"})
                except KubeApiError as exc:
                    if exc.code != 404:
                        raise
            elif isinstance(action, wd.Patch):
                try:
                    self.kube.patch(api_path(action.api_version, action.plural,
                                             action.namespace, action.name), action.body, "merge")
                except KubeApiError as exc:
                    if action.best_effort:
                        log.warning("%s/%s: %s not patched: %s", action.namespace, action.name,
                                    action.plural, exc)
                    elif exc.code != 404:
                        raise

    def post_event(self, patj: Obj, event: wd.PostEvent) -> None:
        """Post a keyed Event; one of the same key posted before (by any replica) is success.
        Any other refusal raises: the status is then not written, and the step is decided and
        posted again on the next tick."""
        assert event.key is not None
        body = mf.job_event(patj, event.type, event.reason, fit_string(event.message, 1000),
                            event.key, now_rfc3339())
        try:
            self.kube.create(api_path("v1", "events", body["metadata"]["namespace"]), body)
        except KubeApiError as exc:
            if exc.code != 409:
                raise

    # --- entry point ---

    def reconcile(self, patj: Obj, indexes: Indexes | None = None,
                  commit: Commit | None = None) -> Step:
        """Advance the job as far as the world allows right now: decide, act, and decide again
        on a fresh world while a step moved the phase (up to five steps). `commit`: a decision
        that starts a worker under a budget's grant is stored with it first (`commits_power`);
        when that store meets a newer object, nothing of the decision is done."""
        indexes = indexes or Indexes()
        status = dc.parse_status(patj.get("status"))
        status.observed_generation = patj["metadata"].get("generation")
        step = Step(status)
        if status.phase.final:
            return step
        spec = dc.parse_spec(patj.get("spec"))
        entered = False
        for _ in range(5):
            world = self.world(patj, step.status, spec, indexes, entered)
            decision = dc.decide(spec, step.status, world, self.settings)
            if world.watched and not dc.records_only(step.status, decision):
                # Decided on the watches' view, which may be late: decide again on reads.
                world = self.world(patj, step.status, spec, indexes, entered, fresh=True)
                decision = dc.decide(spec, step.status, world, self.settings)
            if commit is not None and commits_power(decision) and not commit(decision.status):
                step.conflict = True
                return step
            self.execute(decision.actions, patj)
            step.events += decision.events
            before, step.status = step.status.phase, decision.status
            if step.status.phase is before or step.status.phase.final:
                break
            entered = True
            if any(isinstance(a, wd.Create) and a.plural in _WORKLOADS for a in decision.actions):
                # A Job or DaemonSet just created has produced nothing yet: what it publishes
                # wakes the job (wake.py); reading its empty world now would only cost GETs.
                break
        return step
