"""kopf handlers of PowerBudgets: a loop per budget, thin over `budget.decide_budget`.

Each loop gathers the site's nodes (the fleet watch), the jobs that asked for a share (a kopf
index on the jobs' `status.powerShare`, with the grant sequence each echoes), their profiles
and efficiency vectors (cache ConfigMaps, read once by name: their content never changes under
a name), then fresh from the API server the budget itself (its status holds the grants issued)
and the site's worker pods that have not ended, decides, writes the budget's status with a
resourceVersion precondition (a conflict: read again, decide again), and only then notifies the
grants as job annotations (waking those jobs), posts its Events and sets its metrics. It runs
when a job with a share changes, when the budget is edited, at each schedule step and every poll
interval. It also reads the site's measured draw from the node agents' /metrics (as Prometheus
does), at most once per poll interval per budget, however many jobs wake it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import math
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import kopf
import urllib3
from pydantic import ValidationError

from edgetrain.api.budget import (
    ANNOTATION_POWER_ALLOCATION,
    BUDGET_PLURAL,
    LabelSelector,
    PowerBudgetSpec,
    PowerBudgetStatus,
)
from edgetrain.api.crd import GROUP, PLURAL, VERSION
from edgetrain.api.efficiency import parse_efficiency_json
from edgetrain.api.job import API_VERSION
from edgetrain.api.job_status import Phase, fit_string
from edgetrain.api.keys import LABEL_DEVICE_MODEL, NODE_AGENT_POD_SELECTOR
from edgetrain.api.plan import PowerMetric
from edgetrain.api.profile import parse_profile_csv
from edgetrain.kube import KubeApiError, KubeClient, api_path, now_micro
from edgetrain.operator import handlers as hd
from edgetrain.operator.budget import BudgetJob, decide_budget, job_node
from edgetrain.operator.budget_measure import (
    MeasuredDraw,
    agent_endpoints,
    measured_draw,
    power_reading,
)
from edgetrain.operator.budget_metrics import BUDGET_METRICS
from edgetrain.operator.grants import PodLimit, pod_limits
from edgetrain.operator.manifests import LABEL_MANAGED, MANAGER
from edgetrain.operator.phases import NodeInfo
from edgetrain.operator.wake import sleep_or_wake
from edgetrain.planner import Lut
from edgetrain.planner.budget import JobOptions, job_options

log = logging.getLogger("edgetrain.operator")
_wakes: dict[str, asyncio.Event] = {}
_loops: dict[str, asyncio.AbstractEventLoop] = {}
# (namespace, ConfigMap) → its data: cache entries never change under one name.
_configmaps: dict[tuple[str, str], dict[str, str]] = {}
MAX_CACHED_CONFIGMAPS = 256
SCRAPE_TIMEOUT_S = 2.0
# A step whose status write meets a newer budget reads and decides again, this many times.
CONFLICT_RETRIES = 5
# budget → (monotonic time of its last reading, its nodes, the reading, when (RFC 3339, µs)).
_measured: dict[str, tuple[float, tuple[str, ...], MeasuredDraw, str]] = {}


@dataclass(frozen=True)
class JobRecord:
    """The few fields of a job the budget loop reads (kept in the index)."""

    namespace: str
    name: str
    phase: str
    node: str
    device_model: str
    own_limit_w: float
    metric: str
    created: str
    annotation: str | None
    efficiency_cm: str | None
    profile_cm: str | None
    acknowledged: int
    purpose: str
    training_node: str | None


def wake_budgets() -> None:
    """Wake every budget loop (thread-safe)."""
    for name, event in list(_wakes.items()):
        loop = _loops.get(name)
        if loop is not None:
            loop.call_soon_threadsafe(event.set)


@kopf.index(GROUP, VERSION, BUDGET_PLURAL)
async def edgetrain_budgets(body: kopf.Body, name: str, **_: Any) -> dict[str, LabelSelector]:
    """PowerBudget name → its node selector (jobs read it to know they are on a site)."""
    try:
        return {name: PowerBudgetSpec.model_validate(dict(body.spec)).node_selector}
    except ValidationError:
        return {}


@kopf.index(GROUP, VERSION, PLURAL)
async def edgetrain_budget_jobs(body: kopf.Body, namespace: str | None, name: str,
                                **_: Any) -> dict[str, JobRecord]:
    """PowerBudget name → the jobs that asked it for a share."""
    status = body.get("status") or {}
    share = status.get("powerShare") or {}
    if not share.get("budget"):
        return {}
    spec = body.get("spec") or {}
    limit = spec.get("powerLimitWatts")
    sel = status.get("selection") or {}
    model = share.get("deviceModel") or sel.get("deviceModel") or ""
    profile = next((p.get("configMap") for p in status.get("profiles") or []
                    if p.get("deviceModel") == model), None)
    training = status.get("phase") == Phase.training.value
    return {str(share["budget"]): JobRecord(
        namespace=namespace or "", name=name, phase=str(status.get("phase") or "Pending"),
        node=str(share.get("node") or ""), device_model=model,
        own_limit_w=math.inf if limit is None else float(limit),
        metric=str((spec.get("strategy") or {}).get("powerMetric") or "peak"),
        created=str(body.metadata.get("creationTimestamp") or ""),
        annotation=(body.metadata.annotations or {}).get(ANNOTATION_POWER_ALLOCATION),
        efficiency_cm=(status.get("efficiency") or {}).get("configMap"),
        profile_cm=profile,
        acknowledged=int(share.get("sequence") or 0),
        purpose="profile" if share.get("purpose") == "profile" else "train",
        training_node=sel.get("node") if training else None,
    )}


@kopf.on.event(GROUP, VERSION, PLURAL, id="wake-budgets")
async def wake_on_job_change(body: kopf.Body, **_: Any) -> None:
    """A job with a share changed (phase, plan, echo, end): its budget re-allocates."""
    if (body.get("status") or {}).get("powerShare"):
        wake_budgets()


@kopf.on.update(GROUP, VERSION, BUDGET_PLURAL, field="spec", id="budget-edited")
async def on_budget_edit(name: str, **_: Any) -> None:
    """An edited cap or schedule: re-allocate now."""
    wake_budgets()


@kopf.daemon(GROUP, VERSION, BUDGET_PLURAL, id="budget", cancellation_backoff=1.0,
             cancellation_timeout=1.0)
async def budget_loop(body: kopf.Body, name: str, stopped: kopf.DaemonStopped,
                      **kwargs: Any) -> None:
    """Allocate the budget whenever something it depends on changes."""
    event = asyncio.Event()
    _wakes[name], _loops[name] = event, asyncio.get_running_loop()
    loop = asyncio.get_running_loop()
    try:
        while not stopped:
            context = contextvars.copy_context()
            wait_s = await loop.run_in_executor(
                hd._executor, functools.partial(context.run, _step_logged, body, name, kwargs))
            event.clear()
            await sleep_or_wake(event, wait_s)
    finally:
        _wakes.pop(name, None)
        _loops.pop(name, None)
        _measured.pop(name, None)
        BUDGET_METRICS.forget(name)


def _step_logged(body: kopf.Body, name: str, kwargs: dict[str, Any]) -> float:
    try:
        return budget_step(body, name, kwargs)
    except Exception:
        log.exception("PowerBudget %s: allocation failed; retrying on the next poll", name)
        return hd.SETTINGS.poll_interval_s


def _idle_w(node: NodeInfo) -> float:
    """The node's idle draw: its device model's (the twin's board facts, which follow the
    published idle figures; see docs/operator.md)."""
    from edgetrain.device.sim.boards import BOARDS
    from edgetrain.device.sim.physics import idle_power

    board = BOARDS.get(node.label_map.get(LABEL_DEVICE_MODEL, ""))
    return 0.0 if board is None else round(idle_power(board).total_w, 3)


def _cm(kube: KubeClient, namespace: str, name: str | None) -> dict[str, str] | None:
    if not name:
        return None
    key = (namespace, name)
    if key not in _configmaps:
        got = kube.get_or_none(api_path("v1", "configmaps", namespace, name))
        if got is None:
            return None
        if len(_configmaps) >= MAX_CACHED_CONFIGMAPS:
            _configmaps.pop(next(iter(_configmaps)))  # the oldest: a bounded memory
        _configmaps[key] = dict(got.get("data") or {})
    return _configmaps[key]


def _options(kube: KubeClient, rec: JobRecord) -> JobOptions | None:
    eff = _cm(kube, rec.namespace, rec.efficiency_cm)
    prof = _cm(kube, rec.namespace, rec.profile_cm)
    if not eff or not prof or "efficiency.json" not in eff or "profile.csv" not in prof:
        return None
    try:
        lut = Lut.from_points(parse_profile_csv(prof["profile.csv"], str(rec.profile_cm)))
        vector = parse_efficiency_json(eff["efficiency.json"], str(rec.efficiency_cm))
        return job_options(f"{rec.namespace}/{rec.name}", lut, vector,
                           limit_w=rec.own_limit_w, metric=PowerMetric(rec.metric),
                           node=rec.node)
    except Exception as exc:  # a bad cache entry must not stop the site's other jobs
        log.warning("%s/%s: no options for the budget: %s", rec.namespace, rec.name, exc)
        return None


def site_pods(kube: KubeClient, nodes: Collection[str]) -> list[PodLimit]:
    """The worker pods on `nodes` that have not ended, each at its power limit, fresh from the
    API server (a watch may not show a pod created a moment ago)."""
    items = kube.get(api_path("v1", "pods"), labelSelector=f"{LABEL_MANAGED}={MANAGER}")["items"]
    return pod_limits(items, nodes)


def _gone(kube: KubeClient, previous: PowerBudgetStatus, jobs: list[BudgetJob]) -> set[str]:
    """The jobs the budget holds a record of that the index does not show and that no longer
    exist (read by name: a job that only stopped asking may still plan under its notice)."""
    shown = {j.key for j in jobs}
    out: set[str] = set()
    for alloc in previous.allocations:
        key = f"{alloc.namespace}/{alloc.name}"
        if key in shown or alloc.held_watts is None:
            continue
        if kube.get_or_none(api_path(API_VERSION, PLURAL, alloc.namespace, alloc.name)) is None:
            out.add(key)
    return out


def budget_step(body: kopf.Body, name: str, kwargs: dict[str, Any]) -> float:
    """One allocation of budget `name`; returns how long to sleep at most."""
    kube = hd.reconciler().kube
    for _ in range(CONFLICT_RETRIES):
        wait = _allocate(kube, body, name, kwargs)
        if wait is not None:
            return wait
    log.info("PowerBudget %s: its status kept changing under the step; trying on the next"
             " wake", name)
    return hd.SETTINGS.poll_interval_s


def _allocate(kube: KubeClient, body: kopf.Body, name: str, kwargs: dict[str, Any],
              ) -> float | None:
    """One decision and its writes; None when the budget changed under it (decide again)."""
    try:
        spec = PowerBudgetSpec.model_validate(dict(body.spec))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = "spec." + ".".join(str(p) for p in err["loc"])
        _write_status(kube, name, {"message": fit_string(f"{where}: {err['msg']}")})
        return hd.SETTINGS.poll_interval_s
    fleet = hd.FLEET if hd.FLEET is not None else {}
    nodes = [n for store in list(fleet.values()) for n in store]
    budgets = kwargs.get("edgetrain_budgets", {})
    others = {str(k): sel for k, store in list(budgets.items()) for sel in store}
    # The jobs' echoes first, then the record and the pods fresh: every echo seen is then no
    # newer than the pods seen, so a pod started under an older grant is never missed.
    records = list((kwargs.get("edgetrain_budget_jobs") or {}).get(name, ()))
    current = kube.get_or_none(api_path(API_VERSION, BUDGET_PLURAL, name=name))
    if current is None:
        return hd.SETTINGS.poll_interval_s  # deleted: the daemon stops
    previous = PowerBudgetStatus.model_validate(dict(current.get("status") or {}))
    spec = PowerBudgetSpec.model_validate(dict(current.get("spec") or body.spec))
    node_names = [n.name for n in nodes if spec.node_selector.matches(n.label_map)]
    pods = site_pods(kube, node_names)
    jobs = [BudgetJob(namespace=r.namespace, name=r.name, phase=Phase(r.phase),
                      node=job_node(name, r.node, r.annotation, r.training_node),
                      own_limit_w=r.own_limit_w, created=r.created, annotation=r.annotation,
                      acknowledged=r.acknowledged,
                      purpose="profile" if r.purpose == "profile" else "train",
                      options=_options(kube, r) if not Phase(r.phase).final else None,
                      device_model=r.device_model)
            for r in records]
    now = time.time()
    decision = decide_budget(
        name, spec, previous, generation=current["metadata"].get("generation"),
        seconds_of_day=now % 86_400, nodes=nodes,
        node_idle_w={n.name: _idle_w(n) for n in nodes}, others=others, jobs=jobs, pods=pods,
        gone=_gone(kube, previous, jobs))
    measured, measured_at = _measure(kube, name, decision.status.nodes)
    status = decision.status.model_copy(update={
        "measured_watts": measured.watts, "measured_at": measured_at,
        "unmeasured_nodes": list(measured.missing)})
    # The record first, on the version read: a grant is notified only once it is recorded.
    if not _write_status(kube, name, status.model_dump(mode="json", by_alias=True),
                         resource_version=current["metadata"]["resourceVersion"]):
        return None
    by_key = {(j.namespace, j.name): j for j in jobs}
    for write in decision.writes:
        path = api_path(API_VERSION, PLURAL, write.namespace, write.name)
        try:
            patched = kube.patch(path, {"metadata": {"annotations": {
                ANNOTATION_POWER_ALLOCATION: write.text}}}, "merge")
        except KubeApiError as exc:
            if exc.code != 404:
                raise
            continue
        hd.WAKEUPS.job_changed((write.namespace, str(patched["metadata"]["uid"])), "grant")
        log.info("PowerBudget %s: %s/%s share %s (was %s)", name, write.namespace,
                 write.name, write.text, by_key[(write.namespace, write.name)].annotation)
    for kind, reason, message in decision.events:
        kopf.event(body, type=kind, reason=reason, message=fit_string(message, 1000))
        log.log(logging.WARNING if kind == "Warning" else logging.INFO, "PowerBudget %s %s: %s",
                name, reason, message)
    BUDGET_METRICS.update(name, status)
    wait = hd.SETTINGS.poll_interval_s
    step = spec.next_change_s(now % 86_400)
    return wait if step is None else max(0.5, min(wait, step + 0.5))


def _measure(kube: KubeClient, name: str, nodes: list[str]) -> tuple[MeasuredDraw, str]:
    """The site's measured draw, read again at most once per poll interval."""
    last, key = _measured.get(name), tuple(sorted(nodes))
    if last is not None and last[1] == key \
            and time.monotonic() - last[0] < hd.SETTINGS.poll_interval_s:
        return last[2], last[3]
    try:
        pods = kube.get(api_path("v1", "pods"), labelSelector=NODE_AGENT_POD_SELECTOR)["items"]
    except KubeApiError as exc:
        log.warning("PowerBudget %s: node agents not listed (HTTP %s)", name, exc.code)
        pods = []
    urls = agent_endpoints(pods, nodes)
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(urls)))) as pool:
        readings = dict(zip(urls, pool.map(_scrape, urls.keys(), urls.values()), strict=True))
    measured = measured_draw(nodes, readings)
    if measured.missing:
        log.info("PowerBudget %s: no reading from the node agents of %s", name,
                 ", ".join(measured.missing))
    at = now_micro()
    _measured[name] = (time.monotonic(), key, measured, at)
    return measured, at


# urllib3 (the kubernetes client's own HTTP library): the operator image carries no other.
_http = urllib3.PoolManager(maxsize=8)


def _scrape(node: str, url: str) -> float | None:
    """One agent's board power, or None (unreachable, an error, no reading)."""
    try:
        resp = _http.request("GET", url, timeout=SCRAPE_TIMEOUT_S, retries=False)
        if resp.status != 200:
            raise ValueError(f"HTTP {resp.status}")
        return power_reading(resp.data.decode("utf-8", "replace"), node)
    except (urllib3.exceptions.HTTPError, ValueError) as exc:
        log.debug("node agent of %s at %s: %s", node, url, exc)
        return None


def _write_status(kube: KubeClient, name: str, status: dict[str, Any],
                  resource_version: str | None = None) -> bool:
    """Merge-patch the budget's status; with `resource_version`, only onto that version
    (False on a conflict: the caller reads again). Other refusals are logged and raised."""
    body: dict[str, Any] = {"status": status}
    if resource_version is not None:
        body["metadata"] = {"resourceVersion": resource_version}
    try:
        kube.patch(api_path(API_VERSION, BUDGET_PLURAL, name=name, subresource="status"),
                   body, "merge")
    except KubeApiError as exc:
        if exc.code == 409 and resource_version is not None:
            return False
        log.warning("PowerBudget %s: status not written (HTTP %s: %s)", name, exc.code,
                    fit_string(str(exc), 300))
        if resource_version is not None:
            raise
    return True
