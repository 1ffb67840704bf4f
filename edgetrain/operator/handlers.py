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
from typing import Any

import kopf

from edgetrain.api.crd import GROUP, PLURAL, VERSION
from edgetrain.api.job import API_VERSION
from edgetrain.api.job_status import Phase, PowerAwareTrainingJobStatus, fit_string
from edgetrain.api.keys import (
    LABEL_CACHE,
    LABEL_CACHE_KEY,
    LABEL_JOB,
    LABEL_PHASE,
)
from edgetrain.kube import KubeApiError, KubeClient, api_path, load_configuration
from edgetrain.operator import manifests as mf
from edgetrain.operator.decide import awaited_configmaps, parse_status
from edgetrain.operator.fleet import FleetWatch
from edgetrain.operator.informer import TrainingWatch
from edgetrain.operator.phases import job_finished
from edgetrain.operator.reconcile import Indexes, Reconciler, Step
from edgetrain.operator.settings import OperatorSettings, load_settings
from edgetrain.operator.wake import Wakeups, job_key, owner_key, sleep_or_wake
from edgetrain.operator.world import Producer

SETTINGS: OperatorSettings = load_settings()
WATCH_SERVER_TIMEOUT_S = 45
WATCH_CLIENT_TIMEOUT_S = 50
stats_log = logging.getLogger("edgetrain.operator.stats")
log = logging.getLogger("edgetrain.operator")
_lock = threading.Lock()
_reconciler: Reconciler | None = None
# uid → (the status a reconcile started from, the status the API server accepted). A poll can
# fire on a body that does not show our last status patch yet; reconciling that stale body again
# would repeat transitions, so a body still showing the old status is read as showing the new
# one. Recorded only after the write succeeded; released when the job is final or deleted.
_written: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
# kopf runs the poll loops beside the change handlers: one reconcile per job at a time.
_job_locks: dict[str, threading.Lock] = {}
WAKEUPS = Wakeups()
FLEET: FleetWatch | None = None  # the Jetson nodes (operator/fleet.py), from startup on
# Training Jobs, their pods and progress ConfigMaps (operator/informer.py), from startup on
TRAINING: TrainingWatch | None = None
# Where poll loops run their reconciles: kopf's own pool for sync handlers (set at startup), so
# change handlers and polls share one bound on threads.
_executor: concurrent.futures.Executor | None = None


def _job_lock(uid: str) -> threading.Lock:
    with _lock:
        return _job_locks.setdefault(uid, threading.Lock())


def reconciler() -> Reconciler:
    """One Reconciler (one pooled API client) per operator process."""
    global _reconciler
    with _lock:
        if _reconciler is None:
            _reconciler = Reconciler(KubeClient.connect(), SETTINGS)
        return _reconciler


class _QuietPolls(logging.Filter):
    """Drop kopf's lines for routine handlers ("Handler 'forget' succeeded.", the wake-ups): one
    per job on every status write or watched event would bury the transitions in `kubectl
    logs`."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not text.startswith(_ROUTINE)


_ROUTINE = ("Handler 'forget' succeeded", "Handler 'wake-budgets' succeeded",
            "Handler 'budget-edited' succeeded",
            "Handler 'wake-on-cache' succeeded", "Handler 'wake-on-job' succeeded")


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
    while token and token == _last_login_token.get("token") and time.monotonic() < deadline:
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
    # Server-side filters of the index watches: only the operator's own objects and the Jetson
    # nodes travel to the operator (the handlers' label filters narrow them further).
    managed = f"{mf.LABEL_MANAGED}={mf.MANAGER}"
    settings.watching.label_selectors["configmaps"] = LABEL_CACHE
    settings.watching.label_selectors["jobs"] = managed
    settings.watching.label_selectors["daemonsets"] = managed
    if SETTINGS.peering:
        settings.peering.name = SETTINGS.peering
        settings.peering.mandatory = True


@kopf.on.startup()
def watch_fleet(**_: Any) -> None:
    """The Jetson nodes, listed before the first job is handled and watched from then on."""
    global FLEET
    FLEET = FleetWatch(KubeClient.connect()).start()
    log.info("fleet: %d Jetson node(s) listed", len(FLEET))


@kopf.on.startup()
def watch_training(**_: Any) -> None:
    """Training Jobs, their pods and progress ConfigMaps, watched so that a training job's poll
    reads nothing while they show them. Not waited for: until listed, ticks read by name. A
    training Job that finishes wakes its job from here, once this view has its outcome."""
    global TRAINING
    TRAINING = TrainingWatch(KubeClient.connect(), SETTINGS.namespaces,
                             on_job_done=WAKEUPS.job_changed_threadsafe).start()


@kopf.on.cleanup()
def unwatch_fleet(**_: Any) -> None:
    """Stop the watches with the operator."""
    if FLEET is not None:
        FLEET.stop()
    if TRAINING is not None:
        TRAINING.stop()


def _indexes(kwargs: dict[str, Any]) -> Indexes:
    """The kopf indexes among a handler's kwargs (kopf names them after their functions)."""
    return Indexes(
        nodes=FLEET if FLEET is not None else {},
        training=kwargs.get("edgetrain_training", {}),
        cache=kwargs.get("edgetrain_cache", {}),
        estimators=kwargs.get("edgetrain_estimators", {}),
        profilers=kwargs.get("edgetrain_profilers", {}),
        budgets=kwargs.get("edgetrain_budgets", {}),
        budget_jobs=kwargs.get("edgetrain_budget_jobs", {}),
        training_objects=TRAINING,
    )


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
        for _ in range(CONFLICT_RETRIES):
            try:
                return _reconcile_once(rec, obj, indexes, ns, name, uid)
            except Conflict:
                fresh = rec.kube.get_or_none(api_path(API_VERSION, PLURAL, ns, name))
                if fresh is None:
                    break
                obj = fresh
        log.info("%s/%s: the job kept changing under its reconcile; next tick", ns, name)
        return Step(parse_status(obj.get("status")))


def _reconcile_once(rec: Reconciler, obj: dict[str, Any], indexes: Indexes, ns: str, name: str,
                    uid: str) -> Step:
    memo = _written.get(uid)
    if memo is not None and _ours(obj.get("status") or {}) == memo[0]:
        obj = {**obj, "status": memo[1]}
    before = _ours(obj.get("status") or {})
    stored, version = before, str(obj["metadata"].get("resourceVersion") or "")

    def commit(status: PowerAwareTrainingJobStatus) -> bool:
        nonlocal stored, version
        new = status.wire()
        changed = merge_diff(stored, new)
        if changed:
            try:
                written = write_status(rec.kube, ns, name, changed, version)
            except Conflict:
                return False
            if written is None:
                return False
            stored, version = new, written
            _written[uid] = (before, new)
        return True

    # Where a site budget exists, every write is on the version read: a stale body's write
    # must not drop or mix a share (one that drops `powerShare` lifts the job's cap).
    budgeted = "powerShare" in before or len(indexes.budgets) > 0
    step = rec.reconcile(obj, indexes, commit=commit)
    if step.conflict:
        raise Conflict(f"{ns}/{name}")
    new = step.status.wire()  # no nulls: what the API server will store
    changed = merge_diff(stored, new)
    guard = version if budgeted or "powerShare" in new else None
    if changed and write_status(rec.kube, ns, name, changed, guard) is not None:
        _written[uid] = (before, new)
    return step


def _run(body: kopf.Body, kwargs: dict[str, Any]) -> None:
    started = time.perf_counter()
    obj = {"metadata": dict(body.metadata), "spec": dict(body.spec), "status": dict(body.status)}
    obj["metadata"]["namespace"] = body.metadata.namespace
    ns, name = body.metadata.namespace, body.metadata.name
    step = reconcile_and_write(reconciler(), obj, _indexes(kwargs))
    WAKEUPS.await_configmaps(job_key(body.metadata), awaited_configmaps(step.status, name))
    for event in step.events:
        if event.key is None:  # keyed Events were posted before the status write (world.py)
            # Events take at most 1024 characters; fit_string keeps the end (the last lines).
            kopf.event(body, type=event.type, reason=event.reason,
                       message=fit_string(event.message, 1000))
        level = logging.WARNING if event.type == "Warning" else logging.INFO
        log.log(level, "%s/%s %s: %s", ns, name, event.reason, event.message)
    elapsed = time.perf_counter() - started
    stats_log.debug("reconcile %s/%s phase=%s %.1f ms (memory for %d jobs)", ns, name,
                    step.status.phase.value, elapsed * 1000, memory_size())


def forget(uid: str) -> None:
    """Release what the operator keeps per job (its status memo and its lock)."""
    with _lock:
        _written.pop(uid, None)
        _job_locks.pop(uid, None)


def memory_size() -> int:
    """Jobs the operator keeps memory for (tests, and the stats log)."""
    with _lock:
        return len(_written.keys() | _job_locks.keys())


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


@kopf.on.create(GROUP, VERSION, PLURAL, id="create", backoff=SETTINGS.poll_interval_s)
def on_create(body: kopf.Body, **kwargs: Any) -> None:
    """A new job: start it (Pending → EstimatingEfficiency)."""
    _run(body, kwargs)


@kopf.on.resume(GROUP, VERSION, PLURAL, id="resume", backoff=SETTINGS.poll_interval_s)
def on_resume(body: kopf.Body, **kwargs: Any) -> None:
    """The operator restarted: pick up where the status says."""
    if not _final(body):
        _run(body, kwargs)


@kopf.on.update(
    GROUP, VERSION, PLURAL, field="spec.powerLimitWatts", id="power-limit",
    backoff=SETTINGS.poll_interval_s,
)
def on_power_limit(body: kopf.Body, old: Any, new: Any, **kwargs: Any) -> None:
    """The power limit changed: a training job re-plans at once."""
    log.info("%s/%s power limit %s → %s W", body.metadata.namespace, body.metadata.name, old, new)
    if not _final(body):
        _run(body, kwargs)


@kopf.daemon(
    GROUP, VERSION, PLURAL, id="poll", cancellation_backoff=1.0, cancellation_timeout=1.0,
    when=lambda body, **_: not _final(body),
)
async def poll(body: kopf.Body, stopped: kopf.DaemonStopped, **kwargs: Any) -> None:
    """Reconcile the job when an input it waits for lands (`wake.py`), else every poll
    interval (what no watch reports: pods, nodes, deadlines). The body is kopf's live view."""
    job = job_key(body.metadata)
    wake = WAKEUPS.register(job)
    loop = asyncio.get_running_loop()
    try:
        while not stopped and not _final(body):
            await sleep_or_wake(wake, SETTINGS.poll_interval_s)
            if stopped or _final(body):
                break
            # kopf.event() reads kopf's context variables: the thread runs in this task's copy.
            context = contextvars.copy_context()
            await loop.run_in_executor(
                _executor, functools.partial(context.run, _run_logged, body, kwargs))
    finally:
        WAKEUPS.unregister(job)


def _run_logged(body: kopf.Body, kwargs: dict[str, Any]) -> None:
    """A poll's reconcile: an error is logged and the next poll tries again (a timer's
    failure would have been kopf's to log and retry)."""
    try:
        _run(body, kwargs)
    except Exception:
        log.exception("%s/%s: reconcile failed; retrying on the next poll",
                      body.metadata.namespace, body.metadata.name)


@kopf.on.event(GROUP, VERSION, PLURAL, id="forget")
async def on_event(type: str, body: kopf.Body, **_: Any) -> None:
    """A deleted or finished job needs no memory any more: release it (an operator watching a
    fleet for months must not grow with every job it ever saw)."""
    if type == "DELETED" or _final(body):
        forget(str(body.metadata.uid))
        # Its poll loop may sleep for a whole interval: wake it so that it ends by itself.
        WAKEUPS.job_changed(job_key(body.metadata))


# --- wake-ups: inputs landing, seen by the index watches (no extra watch) ---------------------


@kopf.on.event("configmaps", labels={LABEL_CACHE: kopf.PRESENT}, id="wake-on-cache")
async def wake_on_cache(namespace: str | None, name: str | None, type: str | None,
                        **_: Any) -> None:
    """A cache ConfigMap written: wake the jobs waiting for it (after kopf indexed it, so the
    woken reconcile sees it)."""
    if type != "DELETED":
        WAKEUPS.configmap_changed(namespace or "", name or "")


@kopf.on.event("batch", "v1", "jobs", labels={LABEL_JOB: kopf.PRESENT}, id="wake-on-job")
async def wake_on_job(body: kopf.Body, **_: Any) -> None:
    """One of a job's Jobs finished (or failed): wake the job that owns it."""
    owner = owner_key(body)
    if _done(body) and owner is not None:
        WAKEUPS.job_changed(owner)


# --- indexes: the cluster-wide facts a reconcile reads, kept current by watches ---------------


def _done(body: kopf.Body) -> bool:
    # Not the first succeeded pod: an Indexed estimate Job runs on after each completion.
    job = {"spec": dict(body.get("spec") or {}), "status": dict(body.get("status") or {})}
    return job_finished(job) or bool(body.metadata.get("deletionTimestamp"))


@kopf.index("batch", "v1", "jobs", labels={LABEL_PHASE: "train"})
async def edgetrain_training(
    body: kopf.Body, namespace: str | None, name: str, **_: Any
) -> dict[str, str]:
    """Unfinished training Jobs by the node they are pinned to (Jobs exist before their pods
    are scheduled, so a Job counts from its creation)."""
    if _done(body):
        return {}
    pod = body.get("spec", {}).get("template", {}).get("spec", {})
    node = (pod.get("nodeSelector") or {}).get("kubernetes.io/hostname")
    return {node: f"{namespace}/{name}"} if node else {}


@kopf.index("configmaps", labels={LABEL_CACHE: kopf.PRESENT})
async def edgetrain_cache(
    body: kopf.Body, namespace: str | None, name: str, **_: Any
) -> dict[tuple[str, str], dict[str, str]]:
    """Cache ConfigMaps (efficiency vectors, profiles) by (namespace, name): their data."""
    return {(namespace or "", name): dict(body.get("data") or {})}


def _producer(body: kopf.Body, namespace: str | None, name: str, what: str,
              ) -> dict[tuple[str, str], Producer]:
    if _done(body):
        return {}
    labels = body.metadata.labels
    return {(namespace or "", labels[LABEL_CACHE_KEY]): Producer(mf.controller_uid(body) or "",
                                                          f"{what} {name}")}


@kopf.index("batch", "v1", "jobs", labels={LABEL_CACHE_KEY: kopf.PRESENT})
async def edgetrain_estimators(
    body: kopf.Body, namespace: str | None, name: str, **_: Any
) -> dict[tuple[str, str], Producer]:
    """Estimate Jobs still running, by (namespace, cache key)."""
    return _producer(body, namespace, name, "job")


@kopf.index("apps", "v1", "daemonsets", labels={LABEL_CACHE_KEY: kopf.PRESENT})
async def edgetrain_profilers(
    body: kopf.Body, namespace: str | None, name: str, **_: Any
) -> dict[tuple[str, str], Producer]:
    """Profiling DaemonSets, by (namespace, cache key)."""
    return _producer(body, namespace, name, "daemonset")
