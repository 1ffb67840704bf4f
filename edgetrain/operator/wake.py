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
import time
from collections.abc import Callable, Iterable, Mapping
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


# One way a job's wait can end: every ConfigMap of the group is there (`present`).
Group = frozenset[tuple[str, str]]


class Wakeups:
    """Which job loops wait, on what; thread-safe (reconciles run in worker threads, watch
    handlers on kopf's event loop or in the informers' threads; the events are set on the
    loop). Each wake-up keeps when its watch event arrived and why, for the decision clock
    (`decisions.py`): the first since the job's loop last took them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[JobKey, asyncio.Event] = {}
        self._groups: dict[JobKey, tuple[Group, ...]] = {}  # job → ways its wait ends
        self._waiters: dict[tuple[str, str], set[JobKey]] = {}  # (ns, ConfigMap) → jobs
        self._woken: dict[JobKey, tuple[float, str]] = {}  # job → (monotonic time, cause)
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
            self._woken.pop(job, None)
            self._set_groups(job, ())

    def await_configmaps(self, job: JobKey, configmaps: Iterable[str]) -> None:
        """The cache ConfigMaps the job waits for, any one of which ends its wait (replaces the
        last set)."""
        self.await_groups(job, [[cm] for cm in configmaps])

    def await_groups(self, job: JobKey, groups: Iterable[Iterable[str]]) -> bool:
        """The ways the job's wait ends: one group of ConfigMaps all there (replaces the last
        ones); True when they changed."""
        ns = job[0]
        wanted = tuple(dict.fromkeys(frozenset((ns, cm) for cm in g) for g in groups if g))
        with self._lock:
            changed = self._groups.get(job, ()) != wanted
            if changed:
                self._set_groups(job, wanted)
            return changed

    def configmap_changed(self, namespace: str, name: str,
                          present: Callable[[str, str], bool] | None = None,
                          at: float | None = None) -> int:
        """A cache ConfigMap was written: wake the jobs for which a group that holds it is now
        whole (`present(ns, name)`; None: the written one is the only one asked about); how
        many were woken."""
        with self._lock:
            jobs = list(self._waiters.get((namespace, name), ()))
            groups = {j: self._groups.get(j, ()) for j in jobs}
        woken = 0
        for job in jobs:
            # With `present`, the written one is asked about too (an estimate's parts count
            # only once complete).
            whole = any((namespace, name) in g and all(
                present(ns, cm) if present is not None else (ns, cm) == (namespace, name)
                for ns, cm in g) for g in groups[job])
            if whole and self._wake(job, "configmap", at):
                woken += 1
        return woken

    def ready(self, job: JobKey, present: Callable[[str, str], bool]) -> bool:
        """Whether a group the job waits for is whole already (checked after it registers, for
        what landed while it read its world)."""
        with self._lock:
            groups = self._groups.get(job, ())
        return any(all(present(ns, cm) for ns, cm in g) for g in groups)

    def job_changed(self, job: JobKey, cause: str = "job", at: float | None = None) -> bool:
        """One of the job's own objects reached an outcome: wake its loop (from any thread);
        False when no loop waits for it."""
        return self._wake(job, cause, at)

    def job_changed_threadsafe(self, namespace: str, uid: str, cause: str = "job",
                               at: float | None = None) -> None:
        """`job_changed` from another thread (the informers' watch threads, reconciles)."""
        self._wake((namespace, uid), cause, at)

    def take(self, job: JobKey) -> tuple[float, str] | None:
        """When the job was first woken since the last take, and why (None: not woken)."""
        with self._lock:
            return self._woken.pop(job, None)

    def _note(self, job: JobKey, cause: str, at: float | None) -> None:
        if job not in self._woken:
            self._woken[job] = (time.monotonic() if at is None else at, cause)

    def _wake(self, job: JobKey, cause: str, at: float | None) -> bool:
        """Set the job's event from any thread (through its loop when called off it)."""
        with self._lock:
            event, loop = self._events.get(job), self._loop
            if event is None:
                return False
            self._note(job, cause, at)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and running is loop:
            event.set()
        elif loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(event.set)
        return True

    def size(self) -> int:
        """Jobs with a registered loop or a recorded wait (memory checks in tests)."""
        with self._lock:
            return len(self._events.keys() | self._groups.keys())

    def _set_groups(self, job: JobKey, wanted: tuple[Group, ...]) -> None:
        before = {cm for g in self._groups.pop(job, ()) for cm in g}
        after = {cm for g in wanted for cm in g}
        for cm in before - after:
            waiting = self._waiters.get(cm)
            if waiting is not None:
                waiting.discard(job)
                if not waiting:
                    del self._waiters[cm]
        if wanted:
            self._groups[job] = wanted
            for cm in after:
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
