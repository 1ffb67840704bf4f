"""Gathering one job's world for `decide`: from the watches, and from the API server only what
they lack or what a destructive decision must confirm.

Cluster-wide facts come from watches: the nodes from the fleet watch (`fleet.py`), training
Jobs per node, cache ConfigMaps and other jobs' producers from the operator's informers
(`informer.py`), so a reconcile lists nothing cluster-wide. A job's own Jobs, DaemonSets, pods,
progress ConfigMap and its workers' FailedCreate Events come from the same informers
(`Indexes.own`); with `fresh` (a decision that deletes or fails something, `decide.
destructive`), or with no informers, they are read from the API server. A ConfigMap the
watches say is missing is not fetched: they listed every cache entry, and one this operator
made a moment ago is remembered (`Recent`) until they show it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from edgetrain.api.budget import LabelSelector
from edgetrain.api.job import PowerAwareTrainingJobSpec, efficiency_cache_key
from edgetrain.api.job_status import Phase, PowerAwareTrainingJobStatus
from edgetrain.api.keys import (
    LABEL_JOB,
    LABEL_NODE_KIND,
    LABEL_PHASE,
    NODE_KIND_IDLE,
    NODE_KIND_JETSON,
)
from edgetrain.kube import KubeClient, Obj, api_path
from edgetrain.operator import estimate_manifests as em
from edgetrain.operator import estimate_parts as ep
from edgetrain.operator import manifests as mf
from edgetrain.operator import world as wd
from edgetrain.operator.history import history_configmap_name, spec_history_key
from edgetrain.operator.informer import OwnView, slim
from edgetrain.operator.phases import NodeInfo, candidates, sweep_spec
from edgetrain.operator.roles import node_role
from edgetrain.operator.settings import OperatorSettings

V = TypeVar("V")
# How long one snapshot of the fleet serves reconciles: far below a node's NotReady grace, and
# the index itself trails the API server by about as much.
FLEET_SNAPSHOT_S = 0.5
# How long one read of the GPU servers serves estimate starts: a burst of new jobs reads them
# once, not once each (they change rarely; a server added is seen within this).
SERVERS_SNAPSHOT_S = 5.0
# How long an object this operator created stands in for the watches that do not show it yet.
RECENT_S = 60.0

# An index is a Mapping of key → an iterable of the values of every indexed object.
IndexView = Mapping[Any, Iterable[V]]


@dataclass(frozen=True)
class Indexes:
    """What a reconcile reads without asking the API server (empty where not wanted)."""

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
    # The job's own Jobs, DaemonSets, pods, progress ConfigMap and refusals from the watches
    # (None: read them from the API server)
    own: OwnView | None = None


def _values(index: IndexView[V], key: Any) -> list[V]:
    return _retry(lambda: list(index.get(key, ())))


def _all_values(index: IndexView[V]) -> list[V]:
    return _retry(lambda: [v for store in list(index.values()) for v in store])


def _retry(read: Callable[[], list[V]]) -> list[V]:
    """kopf updates its indexes on its event loop while reconciles read them in worker threads:
    a read that meets a resize is simply repeated."""
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


_DELETED = "deletedHere"  # marks a deletion in `Recent` (no object carries this field)


class Recent:
    """Objects this operator created in the last `RECENT_S`, by (namespace, plural, name): what
    a reconcile sees where the watches do not show them yet (its own create, a moment ago)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # In the order added (each entry lives RECENT_S): the expired ones are at the front.
        self._objs: dict[tuple[str, str, str], tuple[float, Obj]] = {}

    def add(self, plural: str, obj: Obj) -> None:
        """Remember an object just created (its body as sent, or as the API server answered),
        as the watches keep it (`informer.slim`): a burst of 1,000 jobs made 4,096 of them,
        whole, with their pod templates and managedFields, before any was dropped."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), plural, str(meta.get("name")))
        kept = slim(plural, obj)
        now = time.monotonic()
        with self._lock:
            self._objs.pop(key, None)  # re-added: to the back, with its new expiry
            self._objs[key] = (now + RECENT_S, kept)
            while self._objs:  # drop what expired, so the memory follows the last minute
                oldest = next(iter(self._objs))
                if self._objs[oldest][0] > now:
                    break
                del self._objs[oldest]

    def deleted(self, plural: str, namespace: str, name: str) -> None:
        """Remember an object just deleted (background propagation: gone from the API server
        at once), so that a view that still shows it does not have it deleted again."""
        self.add(plural, {"metadata": {"namespace": namespace, "name": name, _DELETED: True}})

    def _entry(self, namespace: str, plural: str, name: str) -> Obj | None:
        with self._lock:
            got = self._objs.get((namespace, plural, name))
        return got[1] if got is not None and got[0] > time.monotonic() else None

    def gone(self, namespace: str, plural: str, name: str) -> bool:
        """The object was deleted here a moment ago."""
        got = self._entry(namespace, plural, name)
        return got is not None and _DELETED in got["metadata"]

    def get(self, namespace: str, plural: str, name: str) -> Obj | None:
        """The object, if created here recently (and not deleted since)."""
        got = self._entry(namespace, plural, name)
        return None if got is None or _DELETED in got["metadata"] else got

    def owned(self, namespace: str, plural: str, owner: str) -> dict[str, Obj]:
        """Recently created objects of `plural` controlled by `owner`, by name."""
        now = time.monotonic()
        with self._lock:
            items = list(self._objs.items())
        return {name: obj for (ns, kind, name), (until, obj) in items
                if ns == namespace and kind == plural and until > now
                and mf.controller_uid(obj) == owner}


def server_list_selector(settings: OperatorSettings) -> str:
    """The label selector the GPU servers are listed with: the serverSelector, and not a node
    that `roles.node_role` can never take as a server (`node-kind=jetson` or `idle`). Without
    the second part each read brought the whole fleet: at 5,000 Jetsons 23 MB and 0.7 s of the
    operator's CPU, every `SERVERS_SNAPSHOT_S` while every starting job waited for it."""
    terms = [f"{k}={v}" for k, v in sorted(settings.server_selector.items())]
    terms += [f"{LABEL_NODE_KIND}!={NODE_KIND_JETSON}", f"{LABEL_NODE_KIND}!={NODE_KIND_IDLE}"]
    return ",".join(terms)


class Gatherer:
    """Reads the world of one reconcile step (see the module docstring)."""

    def __init__(self, client: KubeClient, settings: OperatorSettings) -> None:
        self.kube = client
        self.settings = settings
        self.recent = Recent()
        self._identities: set[str] = set()  # namespaces seen with the worker ServiceAccount
        self._fleet_lock = threading.Lock()
        self._fleet: tuple[object, float, tuple[NodeInfo, ...]] = (None, 0.0, ())
        self._servers_read: tuple[float, tuple[NodeInfo, ...]] | None = None
        self._servers_lock = threading.Lock()

    def world(self, patj: Obj, status: PowerAwareTrainingJobStatus,
              spec: PowerAwareTrainingJobSpec | str, indexes: Indexes,
              entered: bool = False, fresh: bool = False,
              made: Mapping[str, Mapping[str, str]] | None = None) -> wd.World:
        """Everything `decide` needs for the job's current phase, and nothing else. `entered`:
        EstimatingEfficiency began in this reconcile, so it has made no Job yet (a leftover from
        before a restart answers the create with 409, which counts as success). `fresh`: the
        job's own objects are read from the API server, not from the watches. `made`: the
        ConfigMaps an earlier step of this reconcile creates (name → data)."""
        meta = patj["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], str(meta.get("uid") or "")
        job = {"metadata": {k: meta.get(k) for k in
                            ("name", "namespace", "uid", "generation", "annotations")}}
        own = None if fresh else indexes.own
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
            configmaps.update(self._cache(indexes, ns, [cm, parts], made))
            producers[key] = tuple(_values(indexes.estimators, (ns, key)))
            # The vector is published: the Job that made it no longer matters to the decision.
            if not entered and cm not in configmaps:
                jobs, watched = self._owned_workloads(own, ns, uid, "jobs", "estimate", mine)
            if jobs:
                pods = self._pods(own, ns, jobs, f"{mine},{LABEL_PHASE}=estimate")
                if fresh and cm not in configmaps:
                    # The watches may not show what a just-finished estimate published yet.
                    for got_name in (cm, parts):
                        got = self.kube.get_or_none(api_path("v1", "configmaps", ns, got_name))
                        if got is not None:
                            configmaps[got_name] = dict(got.get("data") or {})
            retry_at = status.attempts.next_retry_at
            if (cm not in configmaps and job_name not in jobs and (retry_at or 0) <= time.time()
                    and all(p.owner == uid for p in producers[key])):
                servers = self._servers()  # an estimate Job is about to be made
        elif phase is Phase.profiling:
            keys = [mf.profile_key(sweep_spec(spec, status, c.device_model), c.device_model,
                                   c.l4t)
                    for c in candidates(nodes, self.settings.jetson_selector)]
            configmaps.update(self._cache(indexes, ns, [mf.profile_configmap_name(k)
                                                        for k in keys], made))
            producers.update({k: tuple(_values(indexes.profilers, (ns, k))) for k in keys})
            daemonsets, watched = self._owned_workloads(own, ns, uid, "daemonsets", "profile",
                                                        mine)
            if daemonsets:
                pods = self._pods(own, ns, daemonsets, f"{mine},{LABEL_PHASE}=profile")
        elif phase is Phase.selecting:
            names = [p.config_map for p in status.profiles]
            if status.efficiency is not None:
                names.append(status.efficiency.config_map)
            if spec.strategy.learn_from_history:
                names.append(history_configmap_name(spec_history_key(spec)))
            configmaps.update(self._cache(indexes, ns, names, made))
            # From the index's few entries (nodes that train), not a lookup per node of the fleet.
            # Not its own training Job: one being deleted for a re-plan must not push it away.
            own_job = f"{ns}/{mf.short_name(name, 'train-')}"
            load = dict(_retry(lambda: [(str(node), sum(1 for v in store if not
                                                        str(v).startswith(own_job)))
                                        for node, store in list(indexes.training.items())]))
            for rec in _all_values(indexes.budget_jobs):
                if (rec.namespace, rec.name) != (ns, name) and rec.phase == \
                        Phase.waiting_for_power.value:
                    load[rec.node] = load.get(rec.node, 0) + 1
        elif phase is Phase.training:
            training_job = status.training.job if status.training is not None else None
            jobs, pods, configmaps, watched = self._training(ns, name, uid, training_job, own)
        return wd.World(job=job, now_s=time.time(), nodes=nodes, servers=servers,
                        training_load=load,
                        configmaps=configmaps, jobs=jobs, daemonsets=daemonsets,
                        pods=tuple(pods), producers=producers, worker_identity=worker_identity,
                        budgets=budgets,
                        worker_events=self._refusals(own, ns, {**jobs, **daemonsets}, pods),
                        watched=watched)

    def _owned_workloads(self, own: OwnView | None, ns: str, uid: str, plural: str,
                         phase: str, mine: str) -> tuple[dict[str, Obj], bool]:
        """The job's Jobs (of `phase`) or DaemonSets, and whether from the watches. The label
        narrows a list on the server; the owner's uid decides (the label value is the name cut
        at 63 characters, which two jobs may share)."""
        if own is None:
            api_version = "batch/v1" if plural == "jobs" else "apps/v1"
            return owned_by(self._list(api_version, plural, ns, f"{mine},{LABEL_PHASE}={phase}"),
                            {uid}), False
        found = {n: o for n, o in (own.jobs_of(ns, uid, phase) if plural == "jobs"
                                   else own.daemonsets_of(ns, uid)).items()
                 if not self.recent.gone(ns, plural, n)}
        for got_name, obj in self.recent.owned(ns, plural, uid).items():
            labels = obj["metadata"].get("labels") or {}
            if got_name not in found and labels.get(LABEL_PHASE) == phase and \
                    not self.recent.gone(ns, plural, got_name):
                found[got_name] = obj
        return found, True

    def _pods(self, own: OwnView | None, ns: str, workloads: Mapping[str, Obj],
              selector: str) -> list[Obj]:
        if own is None:
            return list(owned_by(self._list("v1", "pods", ns, selector),
                                 uids_of(workloads)).values())
        return [p for w in workloads.values()
                for p in own.pods(ns, str(w["metadata"].get("uid") or ""))]

    def _training(self, ns: str, name: str, uid: str, training_job: str | None,
                  view: OwnView | None,
                  ) -> tuple[dict[str, Obj], list[Obj], dict[str, Mapping[str, str]], bool]:
        """The training Job, its pods and the progress ConfigMap's data: from the watches where
        they show them; and whether any came from the watches. A Job the status names that
        neither the watches nor this operator's recent creates show is read by name: taken as
        gone, it would be started again next to a running one. Read in this order because the
        trainer publishes its result before it exits: a Job read as finished is followed by a
        ConfigMap that has it."""
        watched = False
        jobs: dict[str, Obj] = {}
        pods: list[Obj] = []
        if training_job:
            job = view.job(ns, training_job, uid) if view is not None else None
            if job is not None:
                watched = True
            elif view is not None and (got := self.recent.get(ns, "jobs", training_job)):
                job, watched = got, True
            else:
                job = self.kube.get_or_none(api_path("batch/v1", "jobs", ns, training_job))
            if job is not None:
                jobs[training_job] = job
                if view is not None:
                    pods = view.pods(ns, str(job["metadata"].get("uid")))
                else:
                    pods = list(self._list("v1", "pods", ns, f"job-name={training_job}")
                                .values())
        progress = mf.progress_configmap_name(name)
        if view is not None:
            got = view.configmap(ns, progress, uid) or self.recent.get(ns, "configmaps",
                                                                       progress)
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
        with self._servers_lock:  # one read for a burst of starts, the others wait for it
            now = time.monotonic()
            read = self._servers_read
            if read is not None and now - read[0] <= SERVERS_SNAPSHOT_S:
                return read[1]
            items = self.kube.get(api_path("v1", "nodes"),
                                  labelSelector=server_list_selector(self.settings))["items"]
            # The selector may be empty (any node): only what `roles` takes as a server counts.
            servers = tuple(n for n in map(NodeInfo.of, items)
                            if node_role(n, self.settings).kind == "server")
            self._servers_read = (now, servers)
            return servers

    def _worker_identity(self, ns: str) -> bool:
        """`ns` has the worker ServiceAccount (remembered once seen, for this operator run)."""
        if ns in self._identities:
            return True
        with self._servers_lock:  # a burst of new jobs in one namespace reads it once
            if ns not in self._identities:
                sa = self.settings.worker_service_account
                if self.kube.get_or_none(api_path("v1", "serviceaccounts", ns, sa)) is None:
                    return False
                self._identities.add(ns)
        return True

    def _cache(self, indexes: Indexes, ns: str, names: list[str],
               made: Mapping[str, Mapping[str, str]] | None = None,
               ) -> dict[str, Mapping[str, str]]:
        """Cache ConfigMaps' data from the index, else from what this reconcile makes or this
        operator made a moment ago; what none of them shows is missing (not fetched)."""
        out: dict[str, Mapping[str, str]] = {}
        for cm in names:
            found = _values(indexes.cache, (ns, cm))
            if found:
                out[cm] = found[0]
            elif made is not None and cm in made:
                out[cm] = made[cm]
            elif (got := self.recent.get(ns, "configmaps", cm)) is not None:
                out[cm] = dict(got.get("data") or {})
        return out

    def _refusals(self, own: OwnView | None, ns: str, workloads: Mapping[str, Obj],
                  pods: list[Obj]) -> dict[str, tuple[Obj, ...]]:
        """FailedCreate Events of each unfinished worker that has no pod (a pod refused at
        admission exists nowhere else): from the Events watch, or read for each such worker."""
        owners = {ref.get("uid") for p in pods
                  for ref in p["metadata"].get("ownerReferences") or []}
        out: dict[str, tuple[Obj, ...]] = {}
        for name, obj in workloads.items():
            uid = obj["metadata"].get("uid")
            done = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                       for c in (obj.get("status") or {}).get("conditions") or [])
            if not uid or uid in owners or done:
                continue
            if own is not None:
                out[name] = own.refusals(ns, str(uid))
                continue
            items = self.kube.get(api_path("v1", "events", ns), fieldSelector=(
                f"involvedObject.uid={uid},reason=FailedCreate"))["items"]
            out[name] = tuple(items)
        return out

    def _list(self, api_version: str, plural: str, ns: str, selector: str) -> dict[str, Obj]:
        items = self.kube.get(api_path(api_version, plural, ns), labelSelector=selector)["items"]
        return {o["metadata"]["name"]: o for o in items}
