"""kopf handlers: thin wrappers that run `Reconciler.reconcile` and write status and Events.

Settings are read from the environment when this module is imported (`edgetrain operator`
sets the environment from its flags first), because kopf's timer interval is fixed at
registration.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import kopf

from edgetrain.api.crd import GROUP, PLURAL, VERSION
from edgetrain.api.job_status import Phase, PowerAwareTrainingJobStatus, fit_string
from edgetrain.kube import KubeClient, load_configuration
from edgetrain.operator.reconcile import Reconciler
from edgetrain.operator.settings import OperatorSettings, load_settings

SETTINGS: OperatorSettings = load_settings()
WATCH_SERVER_TIMEOUT_S = 45
WATCH_CLIENT_TIMEOUT_S = 50
stats_log = logging.getLogger("edgetrain.operator.stats")
_lock = threading.Lock()
_reconciler: Reconciler | None = None
# uid → (the status a reconcile started from, the status it wrote). A timer can fire on a body
# that does not show our last status patch yet; reconciling that stale body again would repeat
# transitions, so a body still showing the old status is read as showing the new one.
_written: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
# kopf runs timers beside the change handlers: one reconcile per job at a time.
_job_locks: dict[str, threading.Lock] = {}


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
    """Drop kopf's "Timer 'poll' succeeded." lines: one per job every poll interval would bury
    the transitions in `kubectl logs`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timer 'poll' succeeded")


logging.getLogger("kopf.objects").addFilter(_QuietPolls())


@kopf.on.login()
def login(**_: Any) -> kopf.ConnectionInfo:
    """kopf's credentials from the same loader as every other client (kopf asks again on a
    401, so a rotated ServiceAccount token is picked up)."""
    cfg = load_configuration()
    scheme, _sep, token = str(cfg.get_api_key_with_prefix("BearerToken") or "").partition(" ")
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
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="edgetrain.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="edgetrain.io", key="last-handled-configuration"
    )
    if SETTINGS.peering:
        settings.peering.name = SETTINGS.peering
        settings.peering.mandatory = True


def _run(body: kopf.Body, patch: kopf.Patch) -> None:
    started = time.perf_counter()
    obj = {"metadata": dict(body.metadata), "spec": dict(body.spec), "status": dict(body.status)}
    obj["metadata"]["namespace"] = body.metadata.namespace
    uid = str(body.metadata.uid)
    with _job_lock(uid):
        memo = _written.get(uid)
        if memo is not None and _ours(obj["status"]) == memo[0]:
            obj["status"] = memo[1]
        before = _ours(obj["status"])
        step = reconciler().reconcile(obj)
        new = step.status.wire()  # no nulls: what the API server will store
        changed = merge_diff(before, new)
        for key, value in changed.items():
            patch.status[key] = value
        if changed:
            _written[uid] = (before, new)
    for kind, reason, message in step.events:
        # Events take at most 1024 characters; fit_string keeps the end (the last lines).
        kopf.event(body, type=kind, reason=reason, message=fit_string(message, 1000))
        if kind == "Warning":
            logging.getLogger("edgetrain.operator").warning("%s/%s %s: %s",
                body.metadata.namespace, body.metadata.name, reason, message)
        else:
            logging.getLogger("edgetrain.operator").info("%s/%s %s: %s",
                body.metadata.namespace, body.metadata.name, reason, message)
    elapsed = time.perf_counter() - started
    stats_log.debug("reconcile %s/%s phase=%s %.1f ms", body.metadata.namespace,
                    body.metadata.name, step.status.phase.value, elapsed * 1000)


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
def on_create(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """A new job: start it (Pending → EstimatingEfficiency)."""
    _run(body, patch)


@kopf.on.resume(GROUP, VERSION, PLURAL, id="resume", backoff=SETTINGS.poll_interval_s)
def on_resume(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """The operator restarted: pick up where the status says."""
    if not _final(body):
        _run(body, patch)


@kopf.on.update(
    GROUP, VERSION, PLURAL, field="spec.powerLimitWatts", id="power-limit",
    backoff=SETTINGS.poll_interval_s,
)
def on_power_limit(body: kopf.Body, patch: kopf.Patch, old: Any, new: Any, **_: Any) -> None:
    """The power limit changed: a training job re-plans at once."""
    logging.getLogger("edgetrain.operator").info(
        "%s/%s power limit %s → %s W", body.metadata.namespace, body.metadata.name, old, new)
    if not _final(body):
        _run(body, patch)


@kopf.timer(
    GROUP, VERSION, PLURAL, interval=SETTINGS.poll_interval_s, sharp=False, id="poll",
    when=lambda body, **_: not _final(body),
)
def on_timer(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """Poll the Jobs, DaemonSets, ConfigMaps and Nodes a running job depends on."""
    if not _final(body):
        _run(body, patch)
