"""kopf handlers: thin wrappers that run `Reconciler.reconcile` and write status and Events.

Settings are read from the environment when this module is imported (`edgetrain operator`
sets the environment from its flags first), because the handlers' retry back-off is fixed at
registration.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
import threading
import time
from pathlib import Path
from typing import Any

import kopf

from edgetrain.api.crd import GROUP, PLURAL, VERSION
from edgetrain.api.job import API_VERSION
from edgetrain.api.job_status import (
    PendingEvent,
    Phase,
    PowerAwareTrainingJobStatus,
    fit_string,
)
from edgetrain.api.keys import LABEL_CACHE, LABEL_CACHE_KEY
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path, load_configuration
from edgetrain.operator import decisions
from edgetrain.operator import estimate_manifests as em
from edgetrain.operator import events as ev
from edgetrain.operator import manifests as mf
from edgetrain.operator.decide import parse_status, wake_groups
from edgetrain.operator.decisions import CountingClient
from edgetrain.operator.estimate_parts import parts_complete
from edgetrain.operator.events import EventPoster
from edgetrain.operator.fleet import FleetWatch
from edgetrain.operator.informer import OwnWatch
from edgetrain.operator.phases import job_finished, unix_seconds
from edgetrain.operator.pool import DuePool
from edgetrain.operator.reconcile import Indexes, Reconciler, Step
from edgetrain.operator.settings import OperatorSettings, load_settings
from edgetrain.operator.wake import JobKey, Wakeups, job_key, sleep_or_wake

SETTINGS: OperatorSettings = load_settings()
WATCH_SERVER_TIMEOUT_S = 45
WATCH_CLIENT_TIMEOUT_S = 50
stats_log = logging.getLogger("edgetrain.operator.stats")
log = logging.getLogger("edgetrain.operator")
_lock = threading.Lock()
_reconciler: Reconciler | None = None
_poster: EventPoster | None = None
# uid → (the statuses our last writes replaced, the status the API server last accepted). A
# reconcile can start from a body that does not show our last status patches yet (kopf delivers
# them a moment later); reconciling that stale body again would repeat transitions and write
# over newer fields, so a body still showing one of the replaced statuses is read as showing
# the newest. Recorded only after a write succeeded; released when the job is final or deleted.
_written: dict[str, tuple[tuple[dict[str, Any], ...], dict[str, Any]]] = {}
MEMO_DEPTH = 8  # replaced statuses remembered per job
# One reconcile per job at a time (a wake-up may come while one runs).
_job_locks: dict[str, threading.Lock] = {}
# Jobs this process has reconciled: the first reconcile of one posts what its stored ledger
# holds (a predecessor may have died after the write, before posting; events.py).
_seen: set[str] = set()
WAKEUPS = Wakeups()
FLEET: FleetWatch | None = None  # the Jetson nodes (operator/fleet.py), from startup on
# The operator's own Jobs, DaemonSets, pods, cache and progress ConfigMaps and refusals
# (operator/informer.py), from startup on
OWN: OwnWatch | None = None
# Where the jobs' reconciles run: a pool of their own, sized for I/O-bound waits (a burst of
# wake-ups must not queue behind kopf's 8 handler threads, which the budget loops use), and
# ordered by when each reconcile's cause arrived, a poll an interval later (operator/pool.py):
# the 1,000 fallback polls of a large fleet must not delay a new job or an input that landed.
RECONCILES = DuePool(SETTINGS.reconcile_workers, "reconcile")
# Where a reconcile's creates after its record go (reconcile.py): as many as reconciles.
FOLLOWUPS = concurrent.futures.ThreadPoolExecutor(
    max_workers=SETTINGS.reconcile_workers, thread_name_prefix="followup")
# kopf's own pool for sync handlers (set at startup): the budget loops run there.
_executor: concurrent.futures.Executor | None = None
if SETTINGS.decision_log:
    decisions.set_log(Path(SETTINGS.decision_log))


def _job_lock(uid: str) -> threading.Lock:
    with _lock:
        return _job_locks.setdefault(uid, threading.Lock())


def reconciler() -> Reconciler:
    """One Reconciler (one pooled API client) per operator process."""
    global _reconciler
    with _lock:
        if _reconciler is None:
            cfg = load_configuration()
            # A connection per reconcile thread, the deleters and the Event posters: a pool
            # smaller than the threads opens (and TLS-handshakes) a connection per request.
            cfg.connection_pool_maxsize = 2 * SETTINGS.reconcile_workers + 16
            _reconciler = Reconciler(CountingClient(cfg), SETTINGS)
            _reconciler.followups = FOLLOWUPS
        return _reconciler


def poster(kube: KubeClient | None = None) -> EventPoster:
    """One Event poster per operator process, on the reconciles' client (or `kube`, the
    first time: a test's reconciler)."""
    global _poster
    if _poster is None and kube is None:
        kube = reconciler().kube  # before the lock: reconciler() takes it too
    with _lock:
        if _poster is None:
            assert kube is not None
            _poster = EventPoster(kube)
        return _poster


class _QuietPolls(logging.Filter):
    """Drop kopf's lines for routine handlers ("Handler 'forget' succeeded.", the wake-ups): one
    per job on every status write or watched event would bury the transitions in `kubectl
    logs`."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not text.startswith(_ROUTINE)


_ROUTINE = ("Handler 'forget' succeeded", "Handler 'wake-budgets' succeeded",
            "Handler 'budget-edited' succeeded")


logging.getLogger("kopf.objects").addFilter(_QuietPolls())


# kopf asks again only after a 401, and it refuses the credentials it was just refused: given
# the same token back it stops the operator ("Ran out of valid credentials"). After a
# revocation the kubelet rotates the token file soon after; wait for that first.
TOKEN_ROTATION_WAIT_S = 30.0
_LOGIN_POLL_S = 0.5
_last_login_token: dict[str, str] = {}


def _bearer(cfg: Any) -> tuple[str, str]:
    scheme, _sep, token = str(cfg.get_api_key_with_prefix("BearerToken") or "").partition(" ")
    return scheme, token


@kopf.on.login()
def login(**_: Any) -> kopf.ConnectionInfo:
    """kopf's credentials from the same loader as every other client: on a 401, the rotated
    ServiceAccount token once the file has it (up to TOKEN_ROTATION_WAIT_S)."""
    cfg = load_configuration()
    scheme, token = _bearer(cfg)
    deadline = time.monotonic() + TOKEN_ROTATION_WAIT_S
    refused = _last_login_token.get("token")
    # An empty read is a file being rewritten (not every writer swaps it atomically, as the
    # kubelet does), not a rotation: keep waiting for the new token.
    while refused and token in ("", refused) and time.monotonic() < deadline:
        time.sleep(_LOGIN_POLL_S)
        cfg = load_configuration()
        scheme, token = _bearer(cfg)
    if token:
        _last_login_token["token"] = token
    return kopf.ConnectionInfo(
        server=str(cfg.host),
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        scheme=scheme.capitalize() if token else None,
        token=token or None,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
    )


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Timeouts, workers, event posting, and where kopf keeps its own bookkeeping."""
    settings.posting.level = logging.INFO
    # A watch that stalls (an API server restarted behind a load balancer, a half-open TCP
    # connection) must end within a minute, or the operator sees nothing and says nothing.
    # The server ends each watch after 45 s; if it does not (the stall), the client gives up
    # at 50 s, or earlier after 50 s without any event or bookmark; kopf then reconnects at
    # once from the last resourceVersion, so nothing is missed.
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT_S
    settings.watching.client_timeout = WATCH_CLIENT_TIMEOUT_S
    settings.watching.inactivity_timeout = WATCH_CLIENT_TIMEOUT_S
    settings.watching.connect_timeout = 10
    settings.networking.connect_timeout = 10
    settings.networking.request_timeout = 30
    settings.execution.max_workers = 8
    global _executor
    _executor = settings.execution.executor
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="edgetrain.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="edgetrain.io", key="last-handled-configuration"
    )
    if SETTINGS.peering:
        settings.peering.name = SETTINGS.peering
        settings.peering.mandatory = True


@kopf.on.startup()
def watch_fleet(**_: Any) -> None:
    """The Jetson nodes, listed before the first job is handled and watched from then on."""
    global FLEET
    FLEET = FleetWatch(KubeClient.connect()).start()
    log.info("fleet: %d Jetson node(s) listed", len(FLEET))


# How long start-up waits for the first lists of the operator's own objects.
OWN_LIST_TIMEOUT_S = 120.0


@kopf.on.startup()
def watch_own(**_: Any) -> None:
    """The operator's own Jobs, DaemonSets, pods, ConfigMaps and refusals, listed before the
    first job is handled (a reconcile on an empty view would start what exists) and watched
    from then on; their events wake the jobs (`_on_own`)."""
    global OWN
    OWN = OwnWatch(KubeClient.connect(), SETTINGS.namespaces, on_event=_on_own).start()
    reconciler().cached = OWN.cached
    if not OWN.listed(OWN_LIST_TIMEOUT_S):
        log.warning("the operator's objects not listed within %.0f s; jobs read them by name",
                    OWN_LIST_TIMEOUT_S)
    log.info("watching the operator's objects: %s", OWN.sizes())


@kopf.on.cleanup()
def unwatch_fleet(**_: Any) -> None:
    """Stop the watches with the operator."""
    if FLEET is not None:
        FLEET.stop()
    if OWN is not None:
        OWN.stop()


def _indexes(kwargs: dict[str, Any]) -> Indexes:
    """What a reconcile reads without requests: the watches and the kopf indexes among a
    handler's kwargs (kopf names them after their functions)."""
    own = OWN
    return Indexes(
        nodes=FLEET if FLEET is not None else {},
        training=own.training if own is not None else {},
        cache=own.cache if own is not None else {},
        estimators=own.estimators if own is not None else {},
        profilers=own.profilers if own is not None else {},
        budgets=kwargs.get("edgetrain_budgets", {}),
        budget_jobs=kwargs.get("edgetrain_budget_jobs", {}),
        own=own,
    )


# --- wake-ups from the operator's own watches ---------------------------------------------


def present(namespace: str, name: str) -> bool:
    """A cache ConfigMap the job may wait for is there; an estimate's parts only once every
    run's part is in (one wake-up at the last part, not one per part)."""
    own = OWN
    informer = own.informer("cache", namespace) if own is not None else None
    obj = informer.get(namespace, name) if informer is not None else None
    if obj is None:
        return False
    if (obj["metadata"].get("labels") or {}).get(LABEL_CACHE) != em.PARTS_CACHE:
        return True
    jobs = own.informer("jobs", namespace) if own is not None else None
    job = jobs.get(namespace, name.removesuffix("-parts")) if jobs is not None else None
    return job is not None and parts_complete(obj.get("data") or {}, job)


def _ended(job: Obj | None) -> bool:
    return job is not None and (job_finished(job)
                                or bool(job["metadata"].get("deletionTimestamp")))


def _on_own(kind: str, plural: str, obj: Obj, at: float, old: Obj | None) -> None:
    """An event of the operator's own objects (in a watch thread): a Job that finished (or
    went) wakes its job, once; a cache ConfigMap written wakes the jobs it completes a wait
    of."""
    meta = obj["metadata"]
    ns = str(meta.get("namespace") or "")
    if plural == "jobs":
        owner = mf.controller_uid(obj)
        if owner and (kind == "DELETED" or _ended(obj)) and not _ended(old):
            WAKEUPS.job_changed((ns, owner), "job", at)
    elif plural == "cache" and kind != "DELETED":
        WAKEUPS.configmap_changed(ns, str(meta["name"]), present, at)


def _producing(ns: str, uid: str) -> list[str]:
    """The profile ConfigMaps the job's own DaemonSets make (their publication wakes it early:
    the DaemonSet is then deleted, freeing the node)."""
    own = OWN
    if own is None:
        return []
    return [mf.profile_configmap_name(key) for ds in own.daemonsets_of(ns, uid).values()
            if (key := (ds["metadata"].get("labels") or {}).get(LABEL_CACHE_KEY))]


# --- the status write -----------------------------------------------------------------------


# A reconcile whose power write meets a newer job reads it again and decides again, this often.
CONFLICT_RETRIES = 5


class Conflict(Exception):
    """The status write met a newer object (its resourceVersion precondition failed)."""


def write_status(client: KubeClient, namespace: str, name: str, patch: dict[str, Any],
                 resource_version: str | None = None) -> str | None:
    """Merge-patch the status subresource; the new resourceVersion, or None (logged) when the
    API server refuses it: the caller then remembers nothing, and the next tick reconciles from
    the stored status again. With `resource_version` only onto that version: a conflict raises
    `Conflict` (a power decision is then taken again on a fresh read)."""
    path = api_path(API_VERSION, PLURAL, namespace, name, "status")
    body: dict[str, Any] = {"status": patch}
    if resource_version is not None:
        body["metadata"] = {"resourceVersion": resource_version}
    try:
        return str(client.patch(path, body, "merge")["metadata"].get("resourceVersion") or "")
    except KubeApiError as exc:
        if exc.code == 409 and resource_version is not None:
            raise Conflict(f"{namespace}/{name}") from None
        log.warning("%s/%s: status not written (HTTP %s: %s); retrying on the next tick",
                    namespace, name, exc.code, fit_string(str(exc), 500))
        return None


def reconcile_and_write(rec: Reconciler, obj: dict[str, Any], indexes: Indexes) -> Step:
    """One reconcile of the job in `obj` and its status write; remembers what was written only
    once the API server accepted it. A job under a site budget writes on the version it read
    (a power decision made on an older job, before a newer grant, must not land): on a
    conflict it reads the job again and reconciles again."""
    meta = obj["metadata"]
    ns, name, uid = str(meta["namespace"]), str(meta["name"]), str(meta["uid"])
    with _job_lock(uid):
        _await_followup(uid)
        with _lock:
            ended = uid in _finals
        if ended:  # seen final here: a reconcile from an older body must not act again
            return Step(parse_status(obj.get("status")))
        for _ in range(CONFLICT_RETRIES):
            try:
                step = _reconcile_once(rec, obj, indexes, ns, name, uid)
                if step.followup is not None:
                    _followup(uid, ns, step.followup)
                return step
            except Conflict:
                fresh = rec.kube.get_or_none(api_path(API_VERSION, PLURAL, ns, name))
                if fresh is None:
                    break
                obj = fresh
        log.info("%s/%s: the job kept changing under its reconcile; next tick", ns, name)
        return Step(parse_status(obj.get("status")))


# uid → the writes after a job's last record, still being sent (`Reconciler.followups`)
_followups: dict[str, concurrent.futures.Future[None]] = {}


def _followup(uid: str, ns: str, future: concurrent.futures.Future[None]) -> None:
    """Keep the job's follow-up writes until its next reconcile; one that fails is logged and
    wakes the job (it decides again: what was not made is made)."""
    with _lock:
        _followups[uid] = future

    def done(f: concurrent.futures.Future[None]) -> None:
        exc = f.exception()
        if exc is not None:
            log.warning("%s (uid %s): writes after the status failed: %s; deciding again", ns,
                        uid, fit_string(str(exc), 500))
            WAKEUPS.job_changed((ns, uid), "retry")

    future.add_done_callback(done)


def _await_followup(uid: str) -> None:
    """Wait until the job's last follow-up writes are sent (its world then shows them)."""
    with _lock:
        future = _followups.pop(uid, None)
    if future is not None:
        concurrent.futures.wait([future])


def _remember(uid: str, replaced: dict[str, Any], new: dict[str, Any]) -> None:
    """A status write was accepted: `new` replaced `replaced` (and what was remembered)."""
    with _lock:
        prev = _written.get(uid)
        older = () if prev is None else (*prev[0], prev[1])
        _written[uid] = ((*older, replaced)[-MEMO_DEPTH:], new)


def _job_meta(ns: str, name: str, uid: str) -> Obj:
    return {"metadata": {"name": name, "namespace": ns, "uid": uid}}


def _reconcile_once(rec: Reconciler, obj: dict[str, Any], indexes: Indexes, ns: str, name: str,
                    uid: str) -> Step:
    memo = _written.get(uid)
    if memo is not None and _ours(obj.get("status") or {}) in memo[0]:
        obj = {**obj, "status": memo[1]}
    before = _ours(obj.get("status") or {})
    stored, version = before, str(obj["metadata"].get("resourceVersion") or "")
    events = poster(rec.kube)
    if uid not in _seen:
        # First sight in this process: post what the stored ledger holds (409 where it was).
        _seen.add(uid)
        events.submit(_job_meta(ns, name, uid), parse_status(before).pending_events)

    def with_ledger(status: PowerAwareTrainingJobStatus, new: list[PendingEvent],
                    ) -> PowerAwareTrainingJobStatus:
        held = parse_status(stored).pending_events
        return status.model_copy(update={"pending_events": ev.ledger(
            held, new, events.posted(uid))})

    def write(status: PowerAwareTrainingJobStatus, guard: str | None,
              entries: bool = False) -> bool:
        nonlocal stored, version
        new = status.wire()
        changed = merge_diff(stored, new)
        if list(changed) == ["pendingEvents"] and not entries:
            return True  # only posted entries to drop: they go with the next write
        if changed:
            written = write_status(rec.kube, ns, name, changed, guard)
            if written is None:
                return False
            _remember(uid, stored, new)
            stored, version = new, written
        return True

    def commit(status: PowerAwareTrainingJobStatus) -> bool:
        try:
            return write(with_ledger(status, []), version)
        except Conflict:
            return False

    def store(status: PowerAwareTrainingJobStatus, keyed: list[Any]) -> bool:
        entries = ev.pending(keyed)
        if not write(with_ledger(status, entries), None, bool(entries)):
            return False
        events.submit(_job_meta(ns, name, uid), entries)  # after the write that implies them
        return True

    # Where a site budget exists, every write is on the version read (a stale body's write
    # must not drop or mix a share: one that drops `powerShare` lifts the job's cap), and the
    # writes keep the order decided (reconcile.py).
    budgeted = "powerShare" in before or len(indexes.budgets) > 0
    if not budgeted:
        step = rec.reconcile(obj, indexes, store=store)
        step.status = with_ledger(step.status, [])
        return step
    step = rec.reconcile(obj, indexes, commit=commit)
    if step.conflict:
        raise Conflict(f"{ns}/{name}")
    final = with_ledger(step.status, [])
    guard = version if budgeted or final.power_share is not None else None
    if step.phase_changed:
        decisions.decisive()
    write(final, guard)
    step.status = final
    return step


def _run(body: kopf.Body, kwargs: dict[str, Any],
         woke: tuple[float, str] | None = None) -> None:
    started = time.perf_counter()
    obj = {"metadata": dict(body.metadata), "spec": dict(body.spec), "status": dict(body.status)}
    obj["metadata"]["namespace"] = body.metadata.namespace
    ns, name = str(body.metadata.namespace), str(body.metadata.name)
    uid = str(body.metadata.uid)
    job = job_key(body.metadata)
    at, cause = woke if woke is not None else (time.monotonic(), "poll")
    decisions.begin(f"{ns}/{name}", cause, at)
    now = parse_status(obj["status"])
    # What the job waits for is registered before its world is read: an input that lands
    # while it reads wakes it again (wake.py).
    WAKEUPS.await_groups(job, wake_groups(now, name, _producing(ns, uid)))
    step = Step(now)
    try:
        step = reconcile_and_write(reconciler(), obj, _indexes(kwargs))
    finally:
        record = decisions.end(now.phase.value, step.status.phase.value)
    if WAKEUPS.await_groups(job, wake_groups(step.status, name, _producing(ns, uid))) and \
            WAKEUPS.ready(job, present):
        WAKEUPS.job_changed(job, "ready")  # what it now waits for landed while it decided
    for event in step.events:
        if event.key is None:  # keyed Events go through the ledger and the poster (events.py)
            # Events take at most 1024 characters; fit_string keeps the end (the last lines).
            kopf.event(body, type=event.type, reason=event.reason,
                       message=fit_string(event.message, 1000))
        level = logging.WARNING if event.type == "Warning" else logging.INFO
        log.log(level, "%s/%s %s: %s", ns, name, event.reason, event.message)
    elapsed = time.perf_counter() - started
    stats_log.debug("reconcile %s/%s phase=%s %.1f ms (memory for %d jobs; %s)", ns, name,
                    step.status.phase.value, elapsed * 1000, memory_size(), record)


def forget(uid: str) -> None:
    """Release what the operator keeps per job (its status memo, its lock, its Events)."""
    with _lock:
        if uid in _seen:  # it ended here: its ledger was submitted by its last reconcile
            _finals.setdefault(uid, time.monotonic())
        _written.pop(uid, None)
        _job_locks.pop(uid, None)
        _followups.pop(uid, None)
        _seen.discard(uid)
        poster_ = _poster
    if poster_ is not None:
        poster_.forget(uid)


def memory_size() -> int:
    """Jobs the operator keeps memory for (tests, and the stats log)."""
    with _lock:
        return len(_written.keys() | _job_locks.keys() | _seen)


def merge_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch turning `old` into `new` (null deletes; lists are replaced whole)."""
    out: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        out[key] = None
    for key, value in new.items():
        if key not in old:
            out[key] = value
        elif isinstance(value, dict) and isinstance(old[key], dict):
            sub = merge_diff(old[key], value)
            if sub:
                out[key] = sub
        elif old[key] != value:
            out[key] = value
    return out


def _ours(status: dict[str, Any]) -> dict[str, Any]:
    """The status fields the operator writes (kopf keeps its own bookkeeping elsewhere)."""
    return {k: status[k] for k in _STATUS_KEYS if k in status}


_STATUS_KEYS = tuple(
    f.alias or name for name, f in PowerAwareTrainingJobStatus.model_fields.items()
)


def _final(body: kopf.Body) -> bool:
    phase = body.status.get("phase")
    return phase in (Phase.succeeded.value, Phase.failed.value)


# --- the job's loop: created, resumed, woken, polled -----------------------------------------

# job → the newest body kopf delivered (the loop reconciles from it); job → its loop's task
_bodies: dict[JobKey, kopf.Body] = {}
_loops: dict[JobKey, asyncio.Task[None]] = {}


async def _job_loop(job: JobKey, kwargs: dict[str, Any]) -> None:
    """A job's loop, from the moment kopf first delivers it (created, or found at start-up)
    until it is final or deleted: a reconcile at once, then one whenever an input it waits for
    lands (`wake.py`), else every poll interval (what no watch reports: pods, nodes,
    deadlines). Reconciles run on their own pool (`RECONCILES`). A plain task, not a kopf
    daemon: a daemon needs a finalizer on every job (two PATCHes, and their events, per job)."""
    wake = WAKEUPS.register(job)
    woke: tuple[float, str] | None = (time.monotonic(), "start")
    try:
        while True:
            if woke is None:
                timed_out = not await sleep_or_wake(wake, SETTINGS.poll_interval_s)
                woke = WAKEUPS.take(job)
                if woke is None or timed_out:
                    woke = woke or (time.monotonic(), "poll")
            body = _bodies.get(job)
            if body is None or _final(body):
                break
            # kopf.event() reads kopf's context variables: the thread runs in this task's copy.
            context = contextvars.copy_context()
            await asyncio.wrap_future(RECONCILES.submit(
                functools.partial(context.run, _run_logged, body, kwargs, woke),
                due=_due(woke)))
            woke = None
    finally:
        WAKEUPS.unregister(job)
        if _loops.get(job) is asyncio.current_task():
            del _loops[job]


def _due(woke: tuple[float, str]) -> float:
    """When a reconcile is due in the pool: when its cause arrived, a poll one interval
    later (a start or a wake-up that arrived meanwhile goes first)."""
    at, cause = woke
    return at + (SETTINGS.poll_interval_s if cause == "poll" else 0.0)


@kopf.on.cleanup()
async def stop_job_loops(**_: Any) -> None:
    """Stop the jobs' loops with the operator."""
    for task in list(_loops.values()):
        task.cancel()


def _run_logged(body: kopf.Body, kwargs: dict[str, Any], woke: tuple[float, str]) -> None:
    """A loop's reconcile: an error is logged and the next wake-up or poll tries again."""
    try:
        _run(body, kwargs, woke)
    except Exception:
        log.exception("%s/%s: reconcile failed; retrying on the next poll",
                      body.metadata.namespace, body.metadata.name)


# A final job's ledger is posted by a new replica only this long after it finished (the API
# server keeps Events an hour by default: an older one may be gone, and posting it again would
# announce an old transition as new).
FINAL_LEDGER_S = 3600.0


@kopf.on.event(GROUP, VERSION, PLURAL, id="forget")
async def on_event(type: str, body: kopf.Body, **kwargs: Any) -> None:
    """Every event of a job: the first starts its loop (`_job_loop`), each keeps the body the
    loop reconciles from, a changed spec (a new generation not yet observed: the power limit)
    wakes it at once. A deleted or finished job needs no memory any more: release it (an
    operator watching a fleet for months must not grow with every job it ever saw)."""
    uid = str(body.metadata.uid)
    job = job_key(body.metadata)
    if type == "DELETED" or _final(body):
        if type != "DELETED" and uid not in _seen and _first_final(uid):
            _post_final_ledger(body)
        forget(uid)
        _bodies.pop(job, None)
        # Its loop may sleep for a whole interval: wake it so that it ends by itself.
        WAKEUPS.job_changed(job, "final")
        return
    _bodies[job] = body
    if job not in _loops:
        _loops[job] = asyncio.create_task(_job_loop(job, kwargs), name=f"job {job}")
        return
    status = body.get("status") or {}
    generation = body.metadata.get("generation")
    if generation is not None and status.get("observedGeneration") not in (None, generation):
        WAKEUPS.job_changed(job, "spec")


# Final jobs this process has seen (uid → when), so that each one's ledger is looked at once;
# entries older than FINAL_LEDGER_S are dropped.
_finals: dict[str, float] = {}


def _first_final(uid: str) -> bool:
    """Whether this process sees the final job for the first time (and remember it)."""
    now = time.monotonic()
    with _lock:
        if uid in _finals:
            return False
        if len(_finals) > 4096:
            for old in [u for u, t in _finals.items() if now - t > FINAL_LEDGER_S]:
                del _finals[old]
        _finals[uid] = now
        return True


def _post_final_ledger(body: kopf.Body) -> None:
    """A job found final by a new replica: post its ledger if it finished recently."""
    status = parse_status(dict(body.status))
    finished = unix_seconds(status.finished_at)
    if status.pending_events and finished is not None and \
            time.time() - finished < FINAL_LEDGER_S:
        poster().submit(_job_meta(str(body.metadata.namespace), str(body.metadata.name),
                                  str(body.metadata.uid)), status.pending_events)
