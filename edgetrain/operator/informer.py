"""The operator's own objects, kept by list-and-watch threads (informers): the Jobs and
DaemonSets it made, their pods, the cache and progress ConfigMaps, and the FailedCreate Events
of its workers. A reconcile reads its world from here and sends nothing while they show it;
`reconcile.py` reads from the API server only what they lack, and before a destructive action.

Before, a reconcile read its own objects by GET and LIST (and scanned the namespace's Events
for FailedCreate on every tick): at 100 jobs on 1,000 nodes, 6 to 14 requests in a row before
the decisive write, each one round trip of a saturated API server (`docs/benchmarks/
operator.md`). Own threads, not kopf: a kopf watch that resumes after an expired
resourceVersion re-lists without reporting what vanished meanwhile, and kopf indexes grow with
the square of the objects at start-up (`fleet.py`). Here a re-list replaces the store whole,
so a deleted Job cannot linger. The views still trail the API server by a watch delivery: a
decision taken on them that deletes or fails something is taken again on fresh reads
(`decide.destructive`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any, ClassVar, Protocol

from edgetrain.api.keys import LABEL_CACHE, LABEL_CACHE_KEY, LABEL_PHASE
from edgetrain.kube import KubeClient, Obj, WatchExpired, api_path
from edgetrain.operator import manifests as mf
from edgetrain.operator.phases import job_finished
from edgetrain.operator.world import Producer

log = logging.getLogger("edgetrain.operator")

MANAGED = f"{mf.LABEL_MANAGED}={mf.MANAGER}"
# The training Job, its pods and the progress ConfigMap all carry these labels (manifests.py).
TRAIN_SELECTOR = f"{LABEL_PHASE}=train,{MANAGED}"
FAILED_CREATE = "reason=FailedCreate"
Key = tuple[str, str]  # (namespace, name)
# An index maps an object to the values it is found under (none: not indexed).
Indexer = Callable[[Obj], Iterable[Hashable]]
# (kind of event, the object, monotonic time the watch delivered it, the object before)
Hook = Callable[[str, Obj, float, Obj | None], None]


def _key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (str(meta.get("namespace") or ""), str(meta["name"]))


def _slim(obj: Obj) -> Obj:
    """The object without its managedFields (a third of a pod's size, read by no decision)."""
    meta = obj.get("metadata") or {}
    if "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def _slim_pod(obj: Obj) -> Obj:
    """A pod as decisions read it: metadata and status (its spec only says where it runs)."""
    obj = _slim(obj)
    node = (obj.get("spec") or {}).get("nodeName")
    return {**{k: v for k, v in obj.items() if k != "spec"},
            "spec": {"nodeName": node} if node else {}}


def _slim_job(obj: Obj) -> Obj:
    """A Job as decisions read it: metadata, status, its completions and the node it is pinned
    to (the pod template is the operator's own, and read by no decision)."""
    obj = _slim(obj)
    spec = obj.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {}
    kept: Obj = {k: spec[k] for k in ("completions", "parallelism", "completionMode")
                 if k in spec}
    if pod.get("nodeSelector"):
        kept["template"] = {"spec": {"nodeSelector": pod["nodeSelector"]}}
    return {**{k: v for k, v in obj.items() if k != "spec"}, "spec": kept}


def _slim_workload(obj: Obj) -> Obj:
    """A DaemonSet as decisions read it: metadata and status."""
    obj = _slim(obj)
    return {k: v for k, v in obj.items() if k != "spec"}


def slim(plural: str, obj: Obj) -> Obj:
    """`obj` (of resource `plural`) as the operator's views keep it: what decisions read."""
    return _SLIM.get(plural, _slim)(obj)


_SLIM: dict[str, Callable[[Obj], Obj]] = {
    "jobs": _slim_job, "daemonsets": _slim_workload, "pods": _slim_pod}


def _controller(obj: Obj) -> list[Hashable]:
    uid = mf.controller_uid(obj)
    return [uid] if uid else []


class Informer:
    """The objects at `path` (one namespace or all) matching `selector` (labels) and
    `field_selector`: listed, then watched from the list's resourceVersion; an expired one (410)
    or an error lists again. Thread-safe. Secondary `indexers` (plus `controller`, by the
    controller ownerReference's uid) are kept current with every event, on the object as
    `slim` keeps it. `on_event(kind, obj, at, old)` runs in the watch thread after the store
    took the event (`old`: what it held before)."""

    def __init__(self, kube: KubeClient, path: str, selector: str = "",
                 on_event: Hook | None = None, *, field_selector: str = "",
                 indexers: Mapping[str, Indexer] | None = None,
                 slim: Callable[[Obj], Obj] = _slim) -> None:
        self.kube = kube
        self.path = path
        self.selector = selector
        self.field_selector = field_selector
        self.on_event = on_event
        self.slim = slim
        self.indexers: dict[str, Indexer] = {"controller": _controller, **(indexers or {})}
        self._lock = threading.Lock()
        self._objs: dict[Key, Obj] = {}
        # index name → value → keys; key → index name → the values it is under
        self._index: dict[str, dict[Hashable, set[Key]]] = {n: {} for n in self.indexers}
        self._under: dict[Key, dict[str, list[Hashable]]] = {}
        self.listed = threading.Event()  # set once the first list is in
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Informer:
        """Start the thread (returns at once: until the first list, every read misses)."""
        self._thread = threading.Thread(target=self._run, name=f"watch {self.path}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the watch (the thread returns within its current watch call)."""
        self._stop.set()

    def _params(self) -> dict[str, str]:
        params = {}
        if self.selector:
            params["labelSelector"] = self.selector
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        return params

    def _run(self) -> None:
        params = self._params()
        while not self._stop.is_set():
            try:
                listing = self.kube.get(self.path, **params)
                self.replace(listing.get("items", []))
                rv = str(listing["metadata"].get("resourceVersion", ""))
                while not self._stop.is_set():
                    for kind, obj in self.kube.watch(self.path, rv, params=params):
                        rv = str(obj["metadata"].get("resourceVersion") or rv)
                        if kind != "BOOKMARK":
                            self.apply(kind, obj)
            except WatchExpired:
                continue  # list again: the store is replaced, so deletions missed are seen
            except Exception:  # an outage or a bad answer: say so, list again after a pause
                if self._stop.is_set():
                    return  # stopped while the watch was open: its end is no failure
                log.exception("watch of %s failed; listing again", self.path)
                self._stop.wait(1.0)

    def _values(self, obj: Obj) -> dict[str, list[Hashable]]:
        return {name: list(fn(obj)) for name, fn in self.indexers.items()}

    def _unindex(self, key: Key) -> None:
        for name, values in self._under.pop(key, {}).items():
            index = self._index[name]
            for value in values:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _reindex(self, key: Key, values: dict[str, list[Hashable]]) -> None:
        self._unindex(key)
        self._under[key] = values
        for name, vals in values.items():
            for value in vals:
                self._index[name].setdefault(value, set()).add(key)

    def replace(self, objs: Iterable[Obj]) -> None:
        """A whole list: the store becomes exactly these objects."""
        fresh = {_key(o): self.slim(o) for o in objs}
        values = {key: self._values(obj) for key, obj in fresh.items()}
        with self._lock:
            self._objs = fresh
            self._index = {n: {} for n in self.indexers}
            self._under = {}
            for key, vals in values.items():
                self._reindex(key, vals)
        self.listed.set()

    def apply(self, kind: str, obj: Obj) -> None:
        """One watch event (ADDED, MODIFIED, DELETED)."""
        at = time.monotonic()
        key = _key(obj)
        slim = self.slim(obj)
        values = self._values(slim) if kind != "DELETED" else {}
        with self._lock:
            old = self._objs.get(key)
            if kind == "DELETED":
                self._objs.pop(key, None)
                self._unindex(key)
            else:
                self._objs[key] = slim
                self._reindex(key, values)
        if self.on_event is not None:
            try:
                self.on_event(kind, slim, at, old)
            except Exception:  # a wake-up is an optimisation: never end the watch over it
                log.exception("watch of %s: event handler failed", self.path)

    def get(self, namespace: str, name: str) -> Obj | None:
        """The object by name (None: not seen)."""
        with self._lock:
            return self._objs.get((namespace, name))

    def by(self, index: str, value: Hashable) -> list[Obj]:
        """The objects found under `value` in `index`."""
        with self._lock:
            return [self._objs[k] for k in self._index[index].get(value, ()) if k in self._objs]

    def index_values(self, index: str) -> list[Hashable]:
        """Every value `index` has objects under."""
        with self._lock:
            return list(self._index[index])

    def owned_by(self, uid: str) -> list[Obj]:
        """The objects whose controller ownerReference is `uid`."""
        return self.by("controller", uid)

    def __len__(self) -> int:
        with self._lock:
            return len(self._objs)


class IndexView(Mapping[Any, list[Any]]):
    """A read-only Mapping over one index of informers (value → `convert(obj)` of each object
    found under it), read as the kopf indexes it replaces were read."""

    def __init__(self, informers: Callable[[], Iterable[Informer]], index: str,
                 convert: Callable[[Obj], Any]) -> None:
        self._informers = informers
        self._index = index
        self._convert = convert

    def __getitem__(self, value: Any) -> list[Any]:
        found = [self._convert(o) for i in self._informers() for o in i.by(self._index, value)]
        if not found:
            raise KeyError(value)
        return found

    def __iter__(self) -> Iterator[Any]:
        return iter({v for i in self._informers() for v in i.index_values(self._index)})

    def __len__(self) -> int:
        return len({v for i in self._informers() for v in i.index_values(self._index)})


class OwnView(Protocol):
    """A job's own objects as the watches show them (empty / None: they do not show it)."""

    def jobs_of(self, namespace: str, owner: str, phase: str) -> dict[str, Obj]:
        """The Jobs of phase label `phase` the job with uid `owner` controls, by name."""

    def daemonsets_of(self, namespace: str, owner: str) -> dict[str, Obj]:
        """The DaemonSets the job with uid `owner` controls, by name."""

    def pods(self, namespace: str, workload_uid: str) -> list[Obj]:
        """The pods the workload with `workload_uid` controls."""

    def job(self, namespace: str, name: str, owner: str) -> Obj | None:
        """The Job `name` if the job with uid `owner` controls it."""

    def configmap(self, namespace: str, name: str, owner: str) -> Obj | None:
        """The progress ConfigMap `name` if the job with uid `owner` controls it."""

    def refusals(self, namespace: str, workload_uid: str) -> tuple[Obj, ...]:
        """The FailedCreate Events of the workload with `workload_uid`."""


def _done(obj: Obj) -> bool:
    return job_finished(obj) or bool(obj["metadata"].get("deletionTimestamp"))


def _cache_key(obj: Obj) -> list[Hashable]:
    ns = str(obj["metadata"].get("namespace") or "")
    key = (obj["metadata"].get("labels") or {}).get(LABEL_CACHE_KEY)
    return [(ns, key)] if key else []


def _estimator(obj: Obj) -> list[Hashable]:
    labels = obj["metadata"].get("labels") or {}
    if labels.get(LABEL_PHASE) != "estimate" or _done(obj):
        return []
    return _cache_key(obj)


def _profiler(obj: Obj) -> list[Hashable]:
    return [] if obj["metadata"].get("deletionTimestamp") else _cache_key(obj)


def _training_node(obj: Obj) -> list[Hashable]:
    """An unfinished training Job, under the node it is pinned to (Jobs exist before their pods
    are scheduled, so a Job counts from its creation)."""
    labels = obj["metadata"].get("labels") or {}
    if labels.get(LABEL_PHASE) != "train" or _done(obj):
        return []
    pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    node = (pod.get("nodeSelector") or {}).get("kubernetes.io/hostname")
    return [node] if node else []


def _by_name(obj: Obj) -> list[Hashable]:
    return [_key(obj)]


def _involved(obj: Obj) -> list[Hashable]:
    uid = (obj.get("involvedObject") or {}).get("uid")
    return [uid] if uid else []


def _producer(what: str) -> Callable[[Obj], Producer]:
    def convert(obj: Obj) -> Producer:
        return Producer(mf.controller_uid(obj) or "", f"{what} {obj['metadata']['name']}")
    return convert


class OwnWatch:
    """The operator's own objects in its namespaces (all when `namespaces` is empty): one
    informer per kind and namespace. `on_event(kind, plural, obj, at)` is told every event
    after the store took it (wake-ups, `handlers.py`)."""

    KINDS: ClassVar[dict[str, tuple[str, str, str, str]]] = {
        # plural: (api version, resource, label selector, field selector)
        "jobs": ("batch/v1", "jobs", MANAGED, ""),
        "daemonsets": ("apps/v1", "daemonsets", MANAGED, ""),
        "pods": ("v1", "pods", MANAGED, ""),
        "cache": ("v1", "configmaps", LABEL_CACHE, ""),
        "progress": ("v1", "configmaps", TRAIN_SELECTOR, ""),
        "events": ("v1", "events", "", FAILED_CREATE),
    }
    SLIM: ClassVar[dict[str, Callable[[Obj], Obj]]] = _SLIM
    INDEXERS: ClassVar[dict[str, dict[str, Indexer]]] = {
        "jobs": {"estimator": _estimator, "training": _training_node},
        "daemonsets": {"profiler": _profiler},
        "cache": {"name": _by_name},
        "events": {"involved": _involved},
    }

    def __init__(self, kube: KubeClient, namespaces: Iterable[str] = (),
                 on_event: Callable[[str, str, Obj, float, Obj | None], None] | None = None,
                 ) -> None:
        self.on_event = on_event
        self._informers: dict[str, dict[str | None, Informer]] = {}
        spaces: list[str | None] = list(namespaces) or [None]
        for kind, (api_version, resource, labels, fields) in self.KINDS.items():
            self._informers[kind] = {
                ns: Informer(kube, api_path(api_version, resource, ns), labels,
                             self._hook(kind), field_selector=fields,
                             indexers=self.INDEXERS.get(kind),
                             slim=self.SLIM.get(kind, _slim))
                for ns in spaces}
        self.cache = IndexView(lambda: self._all("cache"), "name",
                               lambda o: dict(o.get("data") or {}))
        self.estimators = IndexView(lambda: self._all("jobs"), "estimator", _producer("job"))
        self.profilers = IndexView(lambda: self._all("daemonsets"), "profiler",
                                   _producer("daemonset"))
        self.training = IndexView(lambda: self._all("jobs"), "training",
                                  lambda o: f"{o['metadata'].get('namespace')}/"
                                            f"{o['metadata']['name']}")

    def _hook(self, kind: str) -> Hook | None:
        if self.on_event is None:
            return None
        report = self.on_event

        def hook(event: str, obj: Obj, at: float, old: Obj | None) -> None:
            report(event, kind, obj, at, old)
        return hook

    def _all(self, kind: str) -> list[Informer]:
        return list(self._informers[kind].values())

    def start(self) -> OwnWatch:
        """Start every informer (returns at once)."""
        for by_ns in self._informers.values():
            for informer in by_ns.values():
                informer.start()
        return self

    def stop(self) -> None:
        """Stop every informer."""
        for by_ns in self._informers.values():
            for informer in by_ns.values():
                informer.stop()

    def listed(self, timeout_s: float) -> bool:
        """Wait until every informer has its first list (start-up, tests)."""
        deadline = time.monotonic() + timeout_s
        return all(i.listed.wait(max(0.0, deadline - time.monotonic()))
                   for by_ns in self._informers.values() for i in by_ns.values())

    def informer(self, kind: str, namespace: str) -> Informer | None:
        """The informer of `kind` that covers `namespace` (None: not a watched namespace)."""
        by_ns = self._informers[kind]
        found = by_ns.get(namespace)  # not `or`: an informer holding nothing is falsy (len 0)
        return found if found is not None else by_ns.get(None)

    def _owned(self, kind: str, namespace: str, owner: str) -> list[Obj]:
        informer = self.informer(kind, namespace)
        if informer is None:
            return []
        return [o for o in informer.owned_by(owner)
                if o["metadata"].get("namespace") == namespace]

    # --- OwnView ---

    def jobs_of(self, namespace: str, owner: str, phase: str) -> dict[str, Obj]:
        """The Jobs of phase `phase` the job `owner` (uid) controls, by name."""
        return {o["metadata"]["name"]: o for o in self._owned("jobs", namespace, owner)
                if (o["metadata"].get("labels") or {}).get(LABEL_PHASE) == phase}

    def daemonsets_of(self, namespace: str, owner: str) -> dict[str, Obj]:
        """The DaemonSets the job `owner` (uid) controls, by name."""
        return {o["metadata"]["name"]: o for o in self._owned("daemonsets", namespace, owner)}

    def pods(self, namespace: str, workload_uid: str) -> list[Obj]:
        """The pods of the Job or DaemonSet with `workload_uid`."""
        return self._owned("pods", namespace, workload_uid)

    def _named(self, kind: str, namespace: str, name: str, owner: str) -> Obj | None:
        informer = self.informer(kind, namespace)
        obj = informer.get(namespace, name) if informer is not None else None
        return obj if obj is not None and mf.controller_uid(obj) == owner else None

    def job(self, namespace: str, name: str, owner: str) -> Obj | None:
        """The Job `name` if the job `owner` (uid) controls it."""
        return self._named("jobs", namespace, name, owner)

    def configmap(self, namespace: str, name: str, owner: str) -> Obj | None:
        """The progress ConfigMap `name` if the job `owner` (uid) controls it."""
        return self._named("progress", namespace, name, owner)

    def refusals(self, namespace: str, workload_uid: str) -> tuple[Obj, ...]:
        """The FailedCreate Events of the workload with `workload_uid`."""
        informer = self.informer("events", namespace)
        return tuple(informer.by("involved", workload_uid)) if informer is not None else ()

    def cached(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """A cache ConfigMap's data (None: the watch does not show it)."""
        informer = self.informer("cache", namespace)
        obj = informer.get(namespace, name) if informer is not None else None
        return None if obj is None else dict(obj.get("data") or {})

    def sizes(self) -> dict[str, int]:
        """Objects held per kind (start-up log, memory checks)."""
        return {kind: sum(len(i) for i in by_ns.values())
                for kind, by_ns in self._informers.items()}
