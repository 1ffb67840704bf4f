"""Wake-ups: a job's poll loop sleeps until an input it waits for lands, or its poll interval.

Without them every decision after a job's creation waits for its next poll tick (2 s by
default), which sets the floor of the operator's decision latency whatever the fleet. The
watches the operator already keeps for its indexes see the inputs land: a cache ConfigMap
published, an estimate or training Job finished. Each reconcile records the cache ConfigMaps
its job still lacks; the watch handlers wake the jobs waiting for what changed. The poll stays
as the fallback for what no watch reports (pods, nodes, deadlines), so a lost wake-up costs one
interval, never a stuck job.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from edgetrain.operator.manifests import controller_uid

# (namespace, the job's uid). Not its name or its edgetrain.io/job label: label values are cut at
# 63 characters, so two long names would share one key. A watched object the operator made names
# its job by its controller ownerReference (`manifests.controller_uid`), which every object
# made since the first release carries.
JobKey = tuple[str, str]


def job_key(metadata: Mapping[str, Any]) -> JobKey:
    """A job's key, from its metadata."""
    return (str(metadata.get("namespace") or ""), str(metadata.get("uid") or ""))


def owner_key(obj: Mapping[str, Any]) -> JobKey | None:
    """The key of the job that made `obj` (a Job, DaemonSet, ConfigMap); None: not one's."""
    uid = controller_uid(obj)
    if uid is None:
        return None
    return (str((obj.get("metadata") or {}).get("namespace") or ""), uid)


class Wakeups:
    """Which job loops wait, on what; thread-safe (reconciles run in worker threads, watch
    handlers on kopf's event loop, where the events are set)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[JobKey, asyncio.Event] = {}
        self._awaits: dict[JobKey, frozenset[tuple[str, str]]] = {}  # job → (ns, ConfigMap)s
        self._waiters: dict[tuple[str, str], set[JobKey]] = {}  # (ns, ConfigMap) → jobs
        self._loop: asyncio.AbstractEventLoop | None = None  # where the events are waited on

    def register(self, job: JobKey) -> asyncio.Event:
        """The event a job's loop waits on (call on the event loop)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._loop = loop
            return self._events.setdefault(job, asyncio.Event())

    def unregister(self, job: JobKey) -> None:
        """The job's loop ended: forget it and what it waited for."""
        with self._lock:
            self._events.pop(job, None)
            self._set_awaits(job, frozenset())

    def await_configmaps(self, job: JobKey, configmaps: Iterable[str]) -> None:
        """After a reconcile: the cache ConfigMaps the job still lacks (replaces the last set)."""
        ns = job[0]
        with self._lock:
            self._set_awaits(job, frozenset((ns, cm) for cm in configmaps))

    def configmap_changed(self, namespace: str, name: str) -> int:
        """A cache ConfigMap was written: wake the jobs waiting for it; how many were woken."""
        with self._lock:
            jobs = list(self._waiters.get((namespace, name), ()))
            events = [self._events[j] for j in jobs if j in self._events]
        for event in events:
            event.set()
        return len(events)

    def job_changed(self, job: JobKey) -> bool:
        """One of the job's own objects reached an outcome: wake its loop."""
        with self._lock:
            event = self._events.get(job)
        if event is not None:
            event.set()
        return event is not None

    def job_changed_threadsafe(self, namespace: str, uid: str) -> None:
        """`job_changed` from another thread (the informers' watch threads)."""
        with self._lock:
            event, loop = self._events.get((namespace, uid)), self._loop
        if event is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(event.set)

    def size(self) -> int:
        """Jobs with a registered loop or a recorded wait (memory checks in tests)."""
        with self._lock:
            return len(self._events.keys() | self._awaits.keys())

    def _set_awaits(self, job: JobKey, wanted: frozenset[tuple[str, str]]) -> None:
        for cm in self._awaits.pop(job, frozenset()) - wanted:
            waiting = self._waiters.get(cm)
            if waiting is not None:
                waiting.discard(job)
                if not waiting:
                    del self._waiters[cm]
        if wanted:
            self._awaits[job] = wanted
            for cm in wanted:
                self._waiters.setdefault(cm, set()).add(job)


async def sleep_or_wake(event: asyncio.Event, timeout_s: float) -> bool:
    """Sleep until `event` is set or `timeout_s` passes; True when woken. Clears the event, so
    wake-ups that came while the job reconciled collapse into one."""
    try:
        await asyncio.wait_for(event.wait(), timeout=timeout_s)
        woken = True
    except TimeoutError:
        woken = False
    event.clear()
    return woken
