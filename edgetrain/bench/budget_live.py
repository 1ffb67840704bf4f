"""The site budget's promise measured from outside on a live cluster (every figure simulated:
the nodes are device twins).

`AuthorisedWatch` watches every pod and, after each event, sums per site node the highest
`edgetrain.io/power-limit-watts` among its pods that have not ended (a profiling pod carries its
sweep's ceiling there), else the node's idle draw: what the node agents were authorised to let
the boards draw, read without the operator's own bookkeeping. `AgentPower` reads the agents'
own board power. `run_rounds` makes jobs arrive 1 to 3 s apart, round after round, optionally
beside a CPU hog, and reports both against the cap (`edgetrain bench budget --cluster`).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from pydantic import BaseModel, Field

from edgetrain.api.crd import PLURAL
from edgetrain.api.job import API_VERSION
from edgetrain.api.keys import ANNOTATION_POWER_LIMIT_WATTS, LABEL_PHASE
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path

POWER_METRIC = "edgetrain_power_total_watts"
FINAL = ("Succeeded", "Failed")


def pod_limit_w(pod: Obj) -> float | None:
    """A pod's power limit annotation (None: none, or not a positive number)."""
    raw = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_POWER_LIMIT_WATTS)
    try:
        value = float(str(raw))
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


_T = TypeVar("_T", bound="InBackground")


class InBackground:
    """Runs `_run` in a daemon thread while the `with` block runs; `_stop` ends it."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self: _T) -> _T:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        raise NotImplementedError


class AuthorisedWatch(InBackground):
    """Per site node the highest limit among its pods that have not ended, else its idle
    draw, summed after every pod event (see the module docstring)."""

    def __init__(self, kube: KubeClient, idle_w: Mapping[str, float]) -> None:
        super().__init__("authorised-watch")
        self.kube, self.idle_w = kube, dict(idle_w)
        self._pods: dict[str, tuple[str, float | None]] = {}  # uid → (node, limit)
        self.samples: list[tuple[float, float, dict[str, float]]] = []  # (time, W, per node)
        self.capped_sweeps: set[str] = set()  # profiling pods seen with a ceiling (uids)
        self._lock = threading.Lock()

    def _run(self) -> None:
        with contextlib.suppress(Exception):  # the stream ends with the cluster
            for kind, pod in self.kube.list_watch(api_path("v1", "pods"), self._stop):
                uid = pod["metadata"]["uid"]
                node = (pod.get("spec") or {}).get("nodeName") or ""
                ended = (pod.get("status") or {}).get("phase") in FINAL
                labels = pod["metadata"].get("labels") or {}
                with self._lock:
                    if labels.get(LABEL_PHASE) == "profile" and pod_limit_w(pod) is not None:
                        self.capped_sweeps.add(uid)
                    if kind == "DELETED" or ended or node not in self.idle_w:
                        self._pods.pop(uid, None)
                    else:
                        self._pods[uid] = (node, pod_limit_w(pod))
                    self._record()

    def _record(self) -> None:
        per_node = dict(self.idle_w)
        for node, limit in self._pods.values():
            if limit is not None:
                per_node[node] = max(per_node[node], limit)
        self.samples.append((time.time(), round(sum(per_node.values()), 3), per_node))

    @property
    def max_w(self) -> float:
        """The highest authorised sum seen."""
        with self._lock:
            return max((w for _t, w, _n in self.samples), default=sum(self.idle_w.values()))

    def over(self, cap_w: float | Callable[[float], float]) -> list[tuple[float, float, dict[
            str, float]]]:
        """The samples over the cap (a number, or the cap in force at a time)."""
        cap_at = cap_w if callable(cap_w) else (lambda _t: float(cap_w))
        with self._lock:
            return [s for s in self.samples if s[1] > cap_at(s[0]) + 1e-6]


class AgentPower(InBackground):
    """Each site node's agent's board power (its /metrics), read every `interval_s`; the site's
    sum once every node has a reading."""

    def __init__(self, urls: Mapping[str, str], interval_s: float = 0.5) -> None:
        super().__init__("agent-power")
        self.urls, self.interval_s = dict(urls), interval_s
        self.latest: dict[str, float] = {}
        self.sums: list[tuple[float, float]] = []  # (time, W)
        self._http = urllib3.PoolManager(maxsize=max(1, len(self.urls)))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            for node, url in self.urls.items():
                with contextlib.suppress(urllib3.exceptions.HTTPError, ValueError):
                    resp = self._http.request("GET", url, timeout=2.0, retries=False)
                    watts = _metric(resp.data.decode("utf-8", "replace"), node)
                    if watts is not None:
                        self.latest[node] = watts
            if set(self.latest) == set(self.urls):
                self.sums.append((time.time(), round(sum(self.latest.values()), 3)))

    def seconds_over(self, limit_w: float) -> float:
        """Time spent above `limit_w` in runs of two or more readings in a row (one reading
        over, between readings under, is a sample's noise, not a sustained draw)."""
        total, run = 0.0, []
        for t, w in [*self.sums, (math.inf, -math.inf)]:
            if w > limit_w:
                run.append(t)
                continue
            if len(run) >= 2:
                total += run[-1] - run[0] + self.interval_s
            run = []
        return round(total, 2)

    @property
    def max_w(self) -> float | None:
        """The highest summed reading."""
        return max((w for _t, w in self.sums), default=None)


def _metric(text: str, node: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(POWER_METRIC + "{") and f'node="{node}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


class Waits(BaseModel):
    """Seconds jobs spent in WaitingForPower (simulated site)."""

    mean_s: float | None = None
    p95_s: float | None = None
    max_s: float | None = None


class LiveBudgetResult(BaseModel):
    """What `edgetrain bench budget --cluster` reports (simulated device twins)."""

    simulated: bool = True
    rounds: int
    jobs: int
    jobs_succeeded: int
    cap_w: float
    idle_w: float
    max_authorised_w: float = Field(description="highest Σ per node of the highest pod limit"
                                    " (or idle), from a watch on every pod")
    authorised_over_cap: int = Field(description="pod events after which that sum was over")
    max_measured_w: float | None = Field(description="highest sum of the agents' readings")
    seconds_over_cap_plus_1w: float = Field(description="time the agents' sum stayed over"
                                            " cap + 1 W, two readings in a row or more")
    capped_sweeps: int = Field(0, description="profiling pods that ran under a grant's ceiling"
                               " (seen by the pod watch)")
    wait_before_profile: Waits = Field(description="waiting for a profiling grant")
    wait_before_training: Waits = Field(description="waiting for a training grant")
    hog_rounds: list[int] = Field(default_factory=list)
    round_seconds: list[float] = Field(default_factory=list)
    failures: list[str] = Field(default_factory=list)


@dataclass
class _JobClock:
    """How long one job waited for power, before its sweep and before its training."""

    profile_s: float = 0.0
    train_s: float = 0.0
    profiled: bool = False
    final: str = ""


def _waits(values: list[float]) -> Waits:
    if not values:
        return Waits()
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return Waits(mean_s=round(statistics.fmean(values), 2), p95_s=round(p95, 2),
                 max_s=round(ordered[-1], 2))


@contextlib.contextmanager
def cpu_hog(on: bool) -> Iterator[None]:
    """A process spinning on one core while the block runs (a busy edge box)."""
    if not on:
        yield
        return
    proc = multiprocessing.get_context("spawn").Process(target=_spin, daemon=True)
    proc.start()
    try:
        yield
    finally:
        proc.terminate()
        proc.join(timeout=5)


def _spin() -> None:
    while True:
        pass


def run_rounds(kube: KubeClient, namespace: str, manifest: Callable[[str], Obj],
               rounds: int, jobs_per_round: int, watch: AuthorisedWatch, cap_w: float,
               *, hog_every: int = 2, seed: int = 0, round_timeout_s: float = 900.0,
               progress: Callable[[str], None] = lambda _m: None) -> tuple[
                   list[_JobClock], list[float], list[int], list[str]]:
    """Rounds of `jobs_per_round` jobs arriving 1 to 3 s apart; each round ends when its jobs
    have; every `hog_every`-th round runs beside a CPU hog. Returns each job's waits, each
    round's seconds, the hog rounds and what failed."""
    rng = random.Random(seed)
    clocks: list[_JobClock] = []
    seconds: list[float] = []
    hogs: list[int] = []
    failures: list[str] = []
    path = api_path(API_VERSION, PLURAL, namespace)
    for r in range(1, rounds + 1):
        hog = hog_every > 0 and r % hog_every == 0
        if hog:
            hogs.append(r)
        names = [f"r{r}-j{i}" for i in range(1, jobs_per_round + 1)]
        mine = {n: _JobClock() for n in names}
        started = time.monotonic()
        with cpu_hog(hog):
            for i, name in enumerate(names):
                if i:
                    time.sleep(rng.uniform(1.0, 3.0))
                kube.create(path, manifest(name))
            deadline = time.monotonic() + round_timeout_s
            last = time.monotonic()
            while time.monotonic() < deadline:
                now = time.monotonic()
                for obj in kube.get(path)["items"]:
                    name = obj["metadata"]["name"]
                    if name not in mine:
                        continue
                    st, clock = obj.get("status") or {}, mine[name]
                    share = st.get("powerShare") or {}
                    sweep = share.get("purpose") == "profile"
                    clock.profiled = clock.profiled or sweep
                    if st.get("phase") == "WaitingForPower":
                        if sweep:
                            clock.profile_s += now - last
                        else:
                            clock.train_s += now - last
                    if st.get("phase") in FINAL:
                        clock.final = str(st["phase"])
                        if st["phase"] == "Failed":
                            failures.append(f"{name}: {st.get('message', '')}")
                last = now
                if all(c.final for c in mine.values()):
                    break
                time.sleep(0.5)
        seconds.append(round(time.monotonic() - started, 1))
        for name, clock in mine.items():
            if not clock.final:
                failures.append(f"{name}: not done after {round_timeout_s:g} s")
        progress(f"round {r}/{rounds}: {sum(c.final == 'Succeeded' for c in mine.values())}"
                 f"/{len(names)} succeeded in {seconds[-1]:.0f} s, authorised max"
                 f" {watch.max_w:.2f} W (cap {cap_w:g} W){' beside a CPU hog' if hog else ''}")
        clocks += mine.values()
        for name in names:
            with contextlib.suppress(KubeApiError):
                kube.delete(api_path(API_VERSION, PLURAL, namespace, name))
    return clocks, seconds, hogs, failures


def summarise(clocks: list[_JobClock], seconds: list[float], hogs: list[int],
              failures: list[str], watch: AuthorisedWatch, power: AgentPower | None,
              cap_w: float, rounds: int) -> LiveBudgetResult:
    """The result of `run_rounds` with the watch's and the agents' figures."""
    return LiveBudgetResult(
        rounds=rounds, jobs=len(clocks),
        jobs_succeeded=sum(c.final == "Succeeded" for c in clocks), cap_w=cap_w,
        idle_w=round(sum(watch.idle_w.values()), 3), max_authorised_w=watch.max_w,
        authorised_over_cap=len(watch.over(cap_w)),
        capped_sweeps=len(watch.capped_sweeps),
        max_measured_w=power.max_w if power is not None else None,
        seconds_over_cap_plus_1w=power.seconds_over(cap_w + 1.0) if power is not None else 0.0,
        wait_before_profile=_waits([c.profile_s for c in clocks if c.profiled]),
        wait_before_training=_waits([c.train_s for c in clocks]),
        hog_rounds=hogs, round_seconds=seconds, failures=failures)


def patj_manifest(template: Mapping[str, Any], name: str,
                  node_selector: Mapping[str, str]) -> Obj:
    """A copy of a job manifest named `name`, placed by `node_selector`."""
    body = {**template, "metadata": {"name": name}}
    spec = dict(template["spec"])
    spec["placement"] = {**(spec.get("placement") or {}),
                         "nodeSelector": dict(node_selector)}
    body["spec"] = spec
    return body
