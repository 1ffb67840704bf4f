"""A training job's own objects, kept by list-and-watch threads (informers): its training Job,
the Job's pods and its progress ConfigMap. The training tick reads them from here and sends
nothing while they show them; what they lack it reads by name (`reconcile.py`).

Before, every training job's fallback poll sent three reads (the progress ConfigMap, the Job,
its pods by label): at 1,000 jobs, 85,000 of the operator's 107,000 requests and the API
server saturated (`docs/benchmarks/operator.md`). Own threads, not kopf: a kopf watch that
resumes after an expired resourceVersion re-lists without reporting what vanished meanwhile,
and kopf indexes grow with the square of the objects at start-up (`fleet.py`). Here a re-list
replaces the store whole, so a deleted Job cannot linger. The views still trail the API
server by a watch delivery: a decision taken on them that does more than record progress is
confirmed on fresh reads (`decide.records_only`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Protocol

from edgetrain.api.keys import LABEL_PHASE
from edgetrain.kube import KubeClient, Obj, WatchExpired, api_path
from edgetrain.operator import manifests as mf

log = logging.getLogger("edgetrain.operator")

# The training Job, its pods and the progress ConfigMap all carry these labels (manifests.py).
TRAIN_SELECTOR = f"{LABEL_PHASE}=train,{mf.LABEL_MANAGED}={mf.MANAGER}"
Key = tuple[str, str]  # (namespace, name)


def _key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (str(meta.get("namespace") or ""), str(meta["name"]))


def _slim(obj: Obj) -> Obj:
    """The object without its managedFields (a third of a pod's size, read by no decision)."""
    meta = obj.get("metadata") or {}
    if "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


class Informer:
    """The objects at `path` (one namespace or all) matching `selector`: listed, then watched
    from the list's resourceVersion; an expired one (410) or an error lists again. Thread-safe;
    `on_event(kind, obj)` runs in the watch thread after the store took the event."""

    def __init__(self, kube: KubeClient, path: str, selector: str,
                 on_event: Callable[[str, Obj], None] | None = None) -> None:
        self.kube = kube
        self.path = path
        self.selector = selector
        self.on_event = on_event
        self._lock = threading.Lock()
        self._objs: dict[Key, Obj] = {}
        self._owned: dict[str, set[Key]] = {}  # controller uid → what it controls
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

    def _run(self) -> None:
        params = {"labelSelector": self.selector}
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

    def replace(self, objs: Iterable[Obj]) -> None:
        """A whole list: the store becomes exactly these objects."""
        fresh = {_key(o): _slim(o) for o in objs}
        owned: dict[str, set[Key]] = {}
        for key, obj in fresh.items():
            uid = mf.controller_uid(obj)
            if uid:
                owned.setdefault(uid, set()).add(key)
        with self._lock:
            self._objs, self._owned = fresh, owned
        self.listed.set()

    def apply(self, kind: str, obj: Obj) -> None:
        """One watch event (ADDED, MODIFIED, DELETED)."""
        key, uid = _key(obj), mf.controller_uid(obj)
        with self._lock:
            if kind == "DELETED":
                self._objs.pop(key, None)
                if uid and uid in self._owned:
                    self._owned[uid].discard(key)
                    if not self._owned[uid]:
                        del self._owned[uid]
            else:
                self._objs[key] = _slim(obj)
                if uid:
                    self._owned.setdefault(uid, set()).add(key)
        if self.on_event is not None:
            try:
                self.on_event(kind, obj)
            except Exception:  # a wake-up is an optimisation: never end the watch over it
                log.exception("watch of %s: event handler failed", self.path)

    def get(self, namespace: str, name: str) -> Obj | None:
        """The object by name (None: not seen)."""
        with self._lock:
            return self._objs.get((namespace, name))

    def owned_by(self, uid: str) -> list[Obj]:
        """The objects whose controller ownerReference is `uid`."""
        with self._lock:
            return [self._objs[k] for k in self._owned.get(uid, ()) if k in self._objs]

    def __len__(self) -> int:
        with self._lock:
            return len(self._objs)


class TrainingView(Protocol):
    """What a training tick reads from watches (None / empty: the watch does not show it)."""

    def job(self, namespace: str, name: str, owner: str) -> Obj | None:
        """The Job `name` if the job with uid `owner` controls it."""

    def pods(self, namespace: str, job_uid: str) -> list[Obj]:
        """The pods the Job with `job_uid` controls."""

    def configmap(self, namespace: str, name: str, owner: str) -> Obj | None:
        """The ConfigMap `name` if the job with uid `owner` controls it."""


class TrainingWatch:
    """Training Jobs, their pods and progress ConfigMaps in the operator's namespaces (all when
    `namespaces` is empty): one informer per kind and namespace. `on_job_done(namespace, uid)`
    is told when a training Job of the job with that uid finishes, from the watch thread, after
    the store has it (the job's wake-up then reads its outcome here)."""

    KINDS = (("jobs", "batch/v1"), ("pods", "v1"), ("configmaps", "v1"))

    def __init__(self, kube: KubeClient, namespaces: Iterable[str] = (),
                 on_job_done: Callable[[str, str], None] | None = None) -> None:
        self.on_job_done = on_job_done
        self._informers: dict[str, dict[str | None, Informer]] = {}
        spaces: list[str | None] = list(namespaces) or [None]
        for plural, api_version in self.KINDS:
            hook = self._job_event if plural == "jobs" else None
            self._informers[plural] = {
                ns: Informer(kube, api_path(api_version, plural, ns), TRAIN_SELECTOR, hook)
                for ns in spaces}

    def start(self) -> TrainingWatch:
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
        """Wait until every informer has its first list (tests, start-up logs)."""
        return all(i.listed.wait(timeout_s) for by_ns in self._informers.values()
                   for i in by_ns.values())

    def _informer(self, plural: str, namespace: str) -> Informer | None:
        by_ns = self._informers[plural]
        return by_ns.get(namespace) or by_ns.get(None)

    def _job_event(self, kind: str, job: Obj) -> None:
        status = job.get("status") or {}
        if self.on_job_done is None or kind == "DELETED":
            return
        if status.get("succeeded") or status.get("failed"):
            owner = mf.controller_uid(job)
            if owner:
                self.on_job_done(str(job["metadata"].get("namespace") or ""), owner)

    def _owned(self, plural: str, namespace: str, name: str, owner: str) -> Obj | None:
        informer = self._informer(plural, namespace)
        obj = informer.get(namespace, name) if informer is not None else None
        return obj if obj is not None and mf.controller_uid(obj) == owner else None

    def job(self, namespace: str, name: str, owner: str) -> Obj | None:
        """The training Job `name` if the job `owner` (uid) controls it."""
        return self._owned("jobs", namespace, name, owner)

    def pods(self, namespace: str, job_uid: str) -> list[Obj]:
        """The pods of the Job with `job_uid`."""
        informer = self._informer("pods", namespace)
        return informer.owned_by(job_uid) if informer is not None else []

    def configmap(self, namespace: str, name: str, owner: str) -> Obj | None:
        """The progress ConfigMap `name` if the job `owner` (uid) controls it."""
        return self._owned("configmaps", namespace, name, owner)

    def sizes(self) -> dict[str, int]:
        """Objects held per kind (start-up log, memory checks)."""
        return {plural: sum(len(i) for i in by_ns.values())
                for plural, by_ns in self._informers.items()}
