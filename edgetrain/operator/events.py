"""Keyed Events off the critical path: posted after the write that decides, retried until they
exist, exactly once by their deterministic names.

A keyed Event (a transition, a worker's start; `world.PostEvent`) is named by the job's uid and
its key, so a second post of the same Event is refused (409) whoever sends it. The status write
that records a decision carries the keyed Events it implies in `status.pendingEvents` (the
ledger); the poster sends them after that write, one job's batch in order; the next status
write drops those seen posted. A replica that takes over (the first reconcile of a job in this
process) posts what its predecessor's ledger holds: 409 where it had been posted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from edgetrain.api.job_status import MAX_PENDING_EVENTS, PendingEvent, fit_string
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path, now_rfc3339
from edgetrain.operator import manifests as mf
from edgetrain.operator import world as wd

log = logging.getLogger("edgetrain.operator")
# How long a keyed Event is retried through API-server outages before it is given up (logged).
RETRY_FOR_S = 600.0


def pending(events: Iterable[wd.PostEvent]) -> list[PendingEvent]:
    """The keyed Events as ledger entries (unkeyed ones are kopf's, posted as they come)."""
    return [PendingEvent(key=e.key, type=e.type, reason=e.reason,
                         message=fit_string(e.message, 1000))
            for e in events if e.key is not None]


def ledger(stored: Sequence[PendingEvent], new: Sequence[PendingEvent],
           posted: set[str]) -> list[PendingEvent]:
    """The ledger a status write carries: what it held and is not yet seen posted, then the new
    entries (by key, the first kept), at most MAX_PENDING_EVENTS (the newest)."""
    out: dict[str, PendingEvent] = {}
    for event in [*stored, *new]:
        if event.key not in posted and event.key not in out:
            out[event.key] = event
    return list(out.values())[-MAX_PENDING_EVENTS:]


def _transient(exc: KubeApiError) -> bool:
    return exc.code in (0, 429) or exc.code >= 500


# Events wait this long before they are posted: a burst of decisions (a hundred jobs created
# at once) sends its decisive writes first, and the Events follow in batches, not in between.
BATCH_S = 0.5


class EventPoster:
    """Posts each job's keyed Events in order, `BATCH_S` after they were submitted, on a few
    threads; remembers, per job uid, the keys that exist (posted here, or refused with 409)."""

    def __init__(self, kube: KubeClient, workers: int = 4, retry_for_s: float = RETRY_FOR_S,
                 batch_s: float = BATCH_S) -> None:
        self.kube = kube
        self.retry_for_s = retry_for_s
        self.batch_s = batch_s
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="events")
        self._lock = threading.Lock()
        self._posted: dict[str, set[str]] = {}  # job uid → keys that exist
        # job uid → Events waiting, in order; a job's queue is drained by one thread at a time
        self._queues: dict[str, deque[tuple[Obj, PendingEvent]]] = {}
        self._due: deque[tuple[float, str]] = deque()  # (when, job uid) to drain, in order
        self._wake = threading.Condition(self._lock)
        self._timer = threading.Thread(target=self._dispatch, name="events-batch", daemon=True)
        self._timer.start()

    def _dispatch(self) -> None:
        """Hand each job's queue to the pool once its batch is due."""
        while True:
            with self._wake:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._wake.wait(None if not self._due
                                    else max(0.0, self._due[0][0] - time.monotonic()))
                _, uid = self._due.popleft()
            self._pool.submit(self._drain, uid)

    def posted(self, uid: str) -> set[str]:
        """The keys of the job's Events known to exist."""
        with self._lock:
            return set(self._posted.get(uid, ()))

    def forget(self, uid: str) -> None:
        """The job is final or deleted: release what is kept for it."""
        with self._lock:
            self._posted.pop(uid, None)

    def submit(self, job: Obj, events: Sequence[PendingEvent]) -> None:
        """Post `events` of the job (`{"metadata": {name, namespace, uid}}`) after the write
        that implied them; returns at once."""
        uid = str(job["metadata"]["uid"])
        todo = [e for e in events if e.key not in self.posted(uid)]
        if not todo:
            return
        with self._lock:
            queue = self._queues.get(uid)
            if queue is not None:  # waiting or being drained: these follow in order
                queue.extend((job, e) for e in todo)
                return
            self._queues[uid] = deque((job, e) for e in todo)
            self._due.append((time.monotonic() + self.batch_s, uid))
            self._wake.notify()

    def _drain(self, uid: str) -> None:
        while True:
            with self._lock:
                queue = self._queues.get(uid)
                if not queue:
                    self._queues.pop(uid, None)
                    return
                job, event = queue.popleft()
            try:
                self._post(job, event)
            except Exception:  # never leave the queue undrained
                log.exception("posting an Event of job uid %s failed", uid)

    def _post(self, job: Obj, event: PendingEvent) -> None:
        uid = str(job["metadata"]["uid"])
        body = mf.job_event(job, event.type, event.reason, event.message, event.key,
                            now_rfc3339())
        path = api_path("v1", "events", body["metadata"]["namespace"])
        deadline = time.monotonic() + self.retry_for_s
        delay_s = 0.5
        while True:
            try:
                self.kube.create(path, body)
                break
            except KubeApiError as exc:
                if exc.code == 409:
                    break  # posted before, by this replica or another
                if not _transient(exc) or time.monotonic() + delay_s > deadline:
                    log.warning("%s/%s: Event %s not posted: %s", job["metadata"]["namespace"],
                                job["metadata"]["name"], event.reason, exc)
                    return
                time.sleep(delay_s)
                delay_s = min(delay_s * 2, 8.0)
        with self._lock:
            self._posted.setdefault(uid, set()).add(event.key)

    def idle(self) -> bool:
        """Nothing is waiting to be posted (tests)."""
        with self._lock:
            return not self._queues
