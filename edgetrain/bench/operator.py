"""`edgetrain bench operator`: the operator's decisions at fleet scale, measured from outside.

A local control plane with kwok nodes of mixed Jetson models runs the real `edgetrain operator`
process (the chart's command) under its own ServiceAccount. Nothing trains: a fake worker does
what the operator's pods would publish (`operator_worker`), and kwok completes the pods. The
bench watches only what anyone can see (the jobs' status, the Jobs and DaemonSets the operator
creates, their labels), so it measures any version of the operator alike:

- decision latency: from an input being ready (the job created, a ConfigMap published, a
  training Job complete) to the first sign of the operator's decision (the next Job or
  DaemonSet it creates for the job, or its status phase changing), p50/p95/p99;
- API requests of the operator, from the API server's audit log of its ServiceAccount;
- the operator's peak RSS (VmHWM) and CPU seconds, and the control plane's, from /proc.

Over 500 lines because the fleet, the watches that time decisions and the result table are one
measurement; the fake worker lives apart in `operator_worker.py`.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from edgetrain.api.crd import GROUP, PLURAL, VERSION
from edgetrain.api.job import API_VERSION, KIND, PowerAwareTrainingJobSpec
from edgetrain.api.keys import LABEL_JOB, LABEL_PHASE
from edgetrain.bench.operator_figures import OperatorFigures, operator_figures
from edgetrain.bench.operator_fleet import (
    LEASE_DURATION_S,
    LEASE_PARALLELISM,
    MIB,
    ApiRequests,
    LeaseLapses,
    ProcReading,
    apiserver_request_counts,
    apply_crds,
    audit_args,
    audit_log_path,
    bench_stages,
    kcm_grace_args,
    kwok_configuration,
    node_list_bytes,
    operator_kubeconfig,
    read_audit,
    read_proc,
)
from edgetrain.bench.operator_worker import FakeWorker
from edgetrain.cluster import binaries
from edgetrain.cluster.boards import profile as board_profile
from edgetrain.cluster.controlplane import LocalCluster
from edgetrain.cluster.kwok import board_node, create_nodes
from edgetrain.cluster.process import ManagedProcess
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path, node_schedulable
from edgetrain.operator.phases import unix_seconds
from edgetrain.workloads.catalog import DATASETS
from edgetrain.workloads.progress import Reporter

NAMESPACE = "edgetrain-bench"
APISERVER_PROFILE = "kube-apiserver-cpu.pprof"
DEFAULT_BOARDS = ("jetson-nano", "jetson-orin-nano", "jetson-xavier-nx", "jetson-agx-orin")
FINAL = ("Succeeded", "Failed")
# The phases after each input, in order: any of them observed means the operator has decided.
AFTER_START = ("EstimatingEfficiency", "Profiling", "Selecting", "Training", *FINAL)
AFTER_EFFICIENCY = ("Profiling", "Selecting", "Training", *FINAL)
AFTER_PROFILES = ("Selecting", "Training", *FINAL)
MODEL, DATASET = "resnet8-w025", "digits"
BATCH_SIZES = [16, 64]
SCHEDULABLE_FRACTION = 0.99


class OperatorBenchConfig(BaseModel):
    """One run: how many jobs on how many nodes, and how the pods' work is simulated."""

    jobs: int = Field(ge=1)
    nodes: int = Field(ge=1, description="kwok Jetson nodes (plus the GPU servers)")
    servers: int = Field(default=1, ge=1, description="kwok GPU servers")
    server_gpus: int | None = Field(default=None, ge=1, description="nvidia.com/gpu of each"
                                    " server; None: room for every job's estimate at once")
    seeds: int = Field(default=1, ge=1, description="seeds per batch size of each estimate")
    boards: list[str] = Field(default_factory=lambda: list(DEFAULT_BOARDS), min_length=1)
    power_limits_w: list[float] = Field(default_factory=lambda: [5.0, 10.0, 20.0], min_length=1)
    work_s: float = Field(default=1.0, ge=0, description="simulated work of every pod")
    deadline_s: float = Field(default=1800.0, gt=0, description="from the first job created")
    poll_interval_s: float | None = Field(default=None, description="None: the operator's own")
    submit_workers: int = Field(default=4, ge=1)
    idle_window_s: float = Field(default=50.0, ge=0, description="the control plane's own load"
                                 " is sampled this long before the first job (0: not at all)")
    apiserver_profile_s: float = Field(default=0.0, ge=0, description="a CPU profile of the API"
                                       " server over this many seconds from the first job"
                                       " (kube-apiserver-cpu.pprof in the run folder; 0: none)")
    lease_duration_s: int = Field(default=LEASE_DURATION_S, ge=10, description="the kwok"
                                  " nodes' Lease duration (renewed every quarter of it); the"
                                  " controller-manager's node grace period matches it")
    lease_parallelism: int = Field(default=LEASE_PARALLELISM, ge=1, description="kwok's Lease"
                                   " renewals in flight")
    operator_src: str | None = Field(default=None, description="run the operator from this"
                                     " source tree (its PYTHONPATH), e.g. an older commit's, to"
                                     " compare; None: this one")


class LatencyStats(BaseModel):
    """Percentiles of one kind of decision (seconds); None when there were none."""

    count: int
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None
    max_s: float | None
    undecided: int = 0  # inputs ready by the end that no decision followed


class ComponentUsage(BaseModel):
    """CPU and memory of one process over the jobs' window."""

    cpu_s: float
    cpu_percent: float  # of one core, averaged over the window
    rss_mb: float  # peak resident set (VmHWM), MiB


class OperatorBenchResult(BaseModel):
    """Everything one run measured (`--json` prints this)."""

    command: str
    date: str
    machine: str
    load_average_before: float  # 1-min load before the jobs were created
    load_average_during: float  # mean of the 1-min load while they ran
    config: OperatorBenchConfig
    node_models: dict[str, int]
    jobs_succeeded: int
    jobs_failed: int
    jobs_unfinished: int
    phases_at_end: dict[str, int]
    failure_messages: list[str]
    wall_s: float  # first job created → last job final (or the deadline)
    submit_s: float = 0.0  # first job POSTed → last job's POST answered
    # operator started → watching jobs and nodes and idle (its start-up lists indexed)
    operator_ready_s: float = 0.0
    decisions: int
    decision_p50_s: float | None
    decision_p95_s: float | None
    decision_p99_s: float | None
    decision_max_s: float | None
    transitions: dict[str, LatencyStats]
    api_requests: int
    api_requests_per_job: float
    api_requests_per_s_mean: float
    api_requests_per_s_peak: float
    api_watches: int  # watch requests opened within the window
    api_status_codes: dict[str, int]
    api_requests_top: dict[str, int]
    operator_rss_mb: float  # peak (VmHWM), MiB
    operator_rss_idle_mb: float  # before the first job
    operator_cpu_s: float
    operator_cpu_percent: float
    control_plane: dict[str, ComponentUsage]
    # The same processes over idle_window_s before the first job: the idle fleet's own cost
    # (kwok's leases and node status), the baseline the jobs' window adds to.
    control_plane_idle: dict[str, ComponentUsage] = {}
    # Every client's requests in the jobs' window (the API server's apiserver_request_total):
    # kwok, the controllers, the scheduler, the bench's fake worker and the operator.
    apiserver_requests: int = 0
    apiserver_requests_top: dict[str, int] = {}
    node_list_mb: float  # one GET /api/v1/nodes answer
    objects_created: dict[str, int]
    # Estimate Job seen → the job past EstimatingEfficiency (its vector merged), per job.
    estimate_phase: LatencyStats | None = None
    estimate_pods_per_node: dict[str, int] = {}  # where the estimates' runs were scheduled
    bench_errors: list[str]
    # ERROR records of the operator's handlers and reconciles (first 10); kopf's own retried
    # connection errors while the API server starts are not counted.
    operator_errors: list[str] = []
    # The same transitions with the clock started when the input was written (the fake worker
    # about to publish, the bench about to POST): the definition before 2026-11-27, to compare.
    decision_p95_s_write_clock: float | None = None
    transitions_write_clock: dict[str, LatencyStats] = {}
    # The operator's own figures (its decision log; None: an operator without one).
    operator: OperatorFigures | None = None
    operator_decision_p95_s: float | None = None  # watch event → first decisive write
    operator_queue_p95_s: float | None = None  # watch event → its reconcile started
    serial_requests_p95: float | None = None  # requests in a row up to the decisive write
    operator_cpu_per_decision_s: float | None = None  # the operator's CPU s / its decisions
    apiserver_round_trip_p50_s: float | None = None  # the operator's requests, audit log
    apiserver_round_trip_p95_s: float | None = None
    # The fleet's health over the idle window and the jobs': leases renewed later than their
    # duration (or not renewed by the end), and NodeNotReady Events (a node's Ready lost).
    lapsed_leases: int = 0
    lapsed_lease_names: list[str] = []
    node_not_ready: int = 0
    lease_renewals: int = 0
    idle_apiserver_requests_per_s: float = 0.0
    idle_apiserver_requests_top: dict[str, int] = {}


# --- what the bench sees -----------------------------------------------------------------


@dataclass
class JobTrack:
    """The externally visible history of one job (monotonic seconds)."""

    created: float | None = None
    phase: str | None = None
    phase_seen: dict[str, float] = field(default_factory=dict)
    efficiency_cm: str | None = None
    profile_cms: list[str] = field(default_factory=list)
    message: str = ""
    estimate_jobs: list[float] = field(default_factory=list)
    daemonsets: list[float] = field(default_factory=list)
    train_jobs: list[float] = field(default_factory=list)
    train_done: float | None = None
    parts_done: float | None = None  # the last part of its estimate published
    seen: float | None = None  # the job first seen by the bench's watch
    parts_seen: float | None = None  # its estimate's parts ConfigMap first seen complete


class Tracker:
    """Folds watch events into per-job histories; thread-safe."""

    def __init__(self, names: list[str], runs: int = len(BATCH_SIZES)) -> None:
        self.jobs = {n: JobTrack() for n in names}
        self.published: dict[str, float] = {}
        self.seen: dict[str, float] = {}  # ConfigMap → first seen with its content
        self.runs = runs  # parts of each estimate
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.estimate_nodes: Counter[str] = Counter()

    def created(self, name: str, at: float) -> None:
        """The bench is about to create job `name`."""
        with self._lock:
            self.jobs[name].created = at

    def publish(self, configmap: str, at: float) -> None:
        """The fake worker is about to publish `configmap` (a part: the job's last so far)."""
        with self._lock:
            self.published.setdefault(configmap, at)
            job, sep, _ = configmap.rpartition("-estimate-")
            if sep and configmap.endswith("-parts") and job in self.jobs:
                self.jobs[job].parts_done = at

    def on_pod(self, kind: str, pod: Obj, at: float) -> None:
        """A pod event: where the estimates' runs are scheduled."""
        labels = pod["metadata"].get("labels") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if labels.get(LABEL_PHASE) != "estimate" or not node or kind == "DELETED":
            return
        with self._lock:
            if pod["metadata"]["uid"] not in self._seen:
                self._seen.add(pod["metadata"]["uid"])
                self.estimate_nodes[node] += 1

    def on_configmap(self, kind: str, cm: Obj, at: float) -> None:
        """A ConfigMap event: when an input is there for the operator (a profile or vector
        with its content, an estimate's parts once all of them are in)."""
        if kind == "DELETED":
            return
        name = str(cm["metadata"]["name"])
        data = cm.get("data") or {}
        with self._lock:
            job, sep, _ = name.rpartition("-estimate-")
            if sep and name.endswith("-parts"):
                track = self.jobs.get(job)
                parts = sum(1 for k in data if k.startswith("part-"))
                if track is not None and track.parts_seen is None and parts >= self.runs:
                    track.parts_seen = at
            elif data and name not in self.seen:
                self.seen[name] = at

    def on_job(self, kind: str, obj: Obj, at: float) -> None:
        """A PowerAwareTrainingJob event."""
        status = obj.get("status") or {}
        with self._lock:
            track = self.jobs.get(obj["metadata"]["name"])
            if track is None:
                return
            if track.seen is None:
                track.seen = at
            phase = status.get("phase")
            if phase and phase != track.phase:
                track.phase = phase
                track.phase_seen.setdefault(phase, at)
            track.message = str(status.get("message") or "")
            track.efficiency_cm = (status.get("efficiency") or {}).get("configMap")
            track.profile_cms = [p["configMap"] for p in status.get("profiles") or []
                                 if p.get("configMap")]

    def on_owned(self, kind: str, obj: Obj, at: float) -> None:
        """A Job or DaemonSet event (the operator's objects carry the job's label)."""
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        with self._lock:
            track = self.jobs.get(labels.get(LABEL_JOB, ""))
            if track is None or kind == "DELETED":
                return
            phase = labels.get(LABEL_PHASE, "")
            if meta["uid"] not in self._seen:
                self._seen.add(meta["uid"])
                what = f"{obj.get('kind', '?')} {phase}"
                self.counts[what] += 1
                {"estimate": track.estimate_jobs, "profile": track.daemonsets,
                 "train": track.train_jobs}.get(phase, []).append(at)
            if (phase == "train" and track.train_done is None
                    and (obj.get("status") or {}).get("succeeded")):
                track.train_done = at

    def training_unseen(self) -> list[str]:
        """Succeeded jobs whose training Job this bench has not yet seen complete."""
        with self._lock:
            return [n for n, t in self.jobs.items()
                    if t.phase == "Succeeded" and t.train_done is None]

    def last_final(self) -> float:
        """When the last job was first seen final (0 if none is)."""
        with self._lock:
            return max((t.phase_seen.get(t.phase or "", 0.0) for t in self.jobs.values()
                        if t.phase in FINAL), default=0.0)

    def phases(self) -> Counter[str]:
        """Jobs per current phase."""
        with self._lock:
            return Counter(t.phase or "Pending" for t in self.jobs.values())


def _first(times: list[float], after: float) -> float | None:
    later = [t for t in times if t >= after]
    return min(later) if later else None


def decisions(track: JobTrack, published: dict[str, float]) -> dict[str, float | None]:
    """Latency per transition of one job (None: the input was ready, no decision followed);
    transitions whose input never became ready are absent."""
    out: dict[str, float | None] = {}

    def decide(name: str, ready: float, objects: list[float], phases: tuple[str, ...]) -> None:
        seen = [t for p, t in track.phase_seen.items() if p in phases]
        first = _first([*objects, *seen], ready)
        out[name] = None if first is None else first - ready

    if track.created is None:
        return out
    decide("start", track.created, [*track.estimate_jobs, *track.daemonsets, *track.train_jobs],
           AFTER_START)
    # The vector is ready when a worker published it, or (an Indexed estimate) its last part.
    eff = published.get(track.efficiency_cm or "", track.parts_done)
    if eff is not None:
        eff = max(eff, track.created)
        decide("efficiency", eff, [*track.daemonsets, *track.train_jobs], AFTER_EFFICIENCY)
        profiles = [published.get(cm) for cm in track.profile_cms]
        if profiles and all(p is not None for p in profiles):
            ready = max(p for p in profiles if p is not None)
            if ready > eff:  # else the efficiency decision already had every profile
                decide("profiles", ready, track.train_jobs, AFTER_PROFILES)
    if track.train_done is not None:
        # The operator goes final only after it read the training Job complete, so a final
        # phase the bench saw first is the skew of its two watch streams: decided at once.
        final = [t for p, t in track.phase_seen.items() if p in FINAL]
        out["training"] = max(0.0, min(final) - track.train_done) if final else None
    return out


def seen_decisions(track: JobTrack, seen: dict[str, float]) -> dict[str, float | None]:
    """Latency per transition with the clock started when the bench's own watch saw the input
    (the job, its vector or its last part, its last profile, its training Job complete): the
    same watch deliveries at both ends, for every transition alike."""
    moved = JobTrack(**{**track.__dict__, "created": track.seen,
                        "parts_done": track.parts_seen})
    # The vector is the operator's own write (it merges the parts): its input is the parts.
    return decisions(moved, {k: v for k, v in seen.items() if k != track.efficiency_cm})


def estimate_phase_s(track: JobTrack) -> float | None:
    """Its estimate Job seen → the job seen past EstimatingEfficiency (None: no estimate ran)."""
    if not track.estimate_jobs:
        return None
    after = [t for p, t in track.phase_seen.items() if p in AFTER_EFFICIENCY]
    return min(after) - track.estimate_jobs[0] if after else None


def latency_stats(values: list[float | None]) -> LatencyStats:
    """p50/p95/p99/max of the decided ones; the undecided are counted apart."""
    done = [v for v in values if v is not None]
    if not done:
        return LatencyStats(count=0, p50_s=None, p95_s=None, p99_s=None, max_s=None,
                            undecided=len(values))
    arr = np.asarray(done)
    p50, p95, p99 = (float(np.percentile(arr, q)) for q in (50, 95, 99))
    return LatencyStats(count=len(done), p50_s=round(p50, 3), p95_s=round(p95, 3),
                        p99_s=round(p99, 3), max_s=round(float(arr.max()), 3),
                        undecided=len(values) - len(done))


# --- the run -------------------------------------------------------------------------------


def job_manifest(name: str, index: int, limits_w: list[float], seeds: int = 1) -> Obj:
    """A small job on every Jetson model; each has its own efficiency key (target accuracy)
    and shares profiles with the jobs of the same power limit; its estimate trains
    len(BATCH_SIZES) × `seeds` runs."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "model": {"architecture": MODEL},
            "dataset": {"name": DATASET},
            "proxyDataset": {"name": DATASET},
            "targetAccuracy": round(0.3 + (index % 5000) * 1e-4, 4),
            "powerLimitWatts": limits_w[index % len(limits_w)],
            "batchSizes": BATCH_SIZES,
            "optimizer": {"name": "adam", "learningRate": 3.0e-3, "referenceBatchSize": 64},
            "budget": {"estimateSamples": 2048, "trainSamples": 4096,
                       "evalIntervalSamples": 256, "evalSamples": 150, "profileMinibatches": 2,
                       "seeds": list(range(seeds))},
        },
    }


TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"


def _registered(node: Obj) -> Obj:
    """A kwok Node as a registering kubelet leaves it: without the `ttl` annotation (the TTL
    controller manages it), with the beta OS and architecture labels (else the node lifecycle
    controller reads and patches every node of a new fleet, which at its request rate goes on
    through the jobs' window: 800 GETs and PATCHes in 90 s at 1,000 nodes)."""
    meta = node["metadata"]
    meta["annotations"].pop(TTL_ANNOTATION, None)
    labels = meta.setdefault("labels", {})
    for stable in ("kubernetes.io/os", "kubernetes.io/arch"):
        if stable in labels:
            labels[f"beta.{stable}"] = labels[stable]
    return node


def node_counts(total: int, boards: list[str]) -> dict[str, int]:
    """`total` nodes spread evenly over the boards (the first ones get the remainder)."""
    base, extra = divmod(total, len(boards))
    return {b: base + (1 if i < extra else 0) for i, b in enumerate(boards) if base or i < extra}


def machine_description() -> str:
    """CPU count and model (for the benchmark page)."""
    cpu = platform.processor() or platform.machine()
    return f"{os.cpu_count()} CPU cores ({cpu}), {platform.system()}"


class _Watches:
    """Watch threads feeding the tracker and the fake worker."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def add(self, path: str, handler: Callable[[str, Obj, float], None],
            **params: str) -> None:
        def pump() -> None:
            for kind, obj in self.kube.list_watch(path, self.stop, **params):
                handler(kind, obj, time.monotonic())

        thread = threading.Thread(target=pump, daemon=True, name=f"watch {path}")
        thread.start()
        self.threads.append(thread)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=40)


class _Sampler:
    """Samples the operator's and the control plane's /proc every second (and the load)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.first: dict[str, ProcReading] = {}
        self.last: dict[str, ProcReading] = {}
        self.loads: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._read(self.first)
        self._thread.start()

    def _read(self, into: dict[str, ProcReading]) -> None:
        for name, pid in self.pids.items():
            reading = read_proc(pid)
            if reading is not None:
                into[name] = reading

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self._read(self.last)
            self.loads.append(os.getloadavg()[0])

    def finish(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._read(self.last)

    def usage(self, name: str, window_s: float) -> ComponentUsage:
        first, last = self.first.get(name), self.last.get(name)
        if first is None or last is None:
            return ComponentUsage(cpu_s=0.0, cpu_percent=0.0, rss_mb=0.0)
        cpu = last.cpu_s - first.cpu_s
        return ComponentUsage(cpu_s=round(cpu, 2),
                              cpu_percent=round(100.0 * cpu / max(window_s, 1e-9), 1),
                              rss_mb=round(last.peak_rss_bytes / MIB, 1))


@contextmanager
def _cluster(run_dir: Path, config: OperatorBenchConfig,
             profiling: bool = False) -> Iterator[LocalCluster]:
    binaries.ensure_binaries()
    stages = run_dir / "kwok-stages.yaml"
    run_dir.mkdir(parents=True, exist_ok=True)
    # The fleet as a healthy real one keeps it: leases the API server keeps up with, renewed
    # with room to spare, and the controller-manager's grace matched to them (bench only).
    stages.write_text(bench_stages((binaries.bin_dir() / "kwok-stages.yaml").read_text())
                      + "---\n" + kwok_configuration(config.lease_duration_s,
                                                    config.lease_parallelism))
    # New Nodes get no not-ready taint (TaintNodesByCondition): the node lifecycle controller
    # lifts it one node at a time, which takes many minutes for thousands of nodes here.
    args = [*audit_args(run_dir), "--disable-admission-plugins=TaintNodesByCondition"]
    if profiling:  # LocalCluster turns it off; a later flag wins
        args.append("--profiling=true")
    cluster = LocalCluster(run_dir, kwok_config=stages, apiserver_args=args,
                           kcm_args=kcm_grace_args(config.lease_duration_s),
                           kwok_lease_duration_s=config.lease_duration_s)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _create_paced(kube: KubeClient, bodies: list[Obj], period_s: float, steps: int = 25
                  ) -> None:
    """Create the nodes spread over one Lease renewal period: kwok renews each Lease a fixed
    period after it first took it, so nodes created at once renew all at once, in bursts of
    the whole fleet (1,000 PUTs in two seconds every 50 s), where a real fleet's renewals are
    spread evenly."""
    chunk = max(1, -(-len(bodies) // steps))
    start = time.monotonic()
    for i in range(0, len(bodies), chunk):
        create_nodes(kube, bodies[i:i + chunk], workers=8)
        wait = start + period_s * (i // chunk + 1) / steps - time.monotonic()
        if wait > 0 and i + chunk < len(bodies):
            time.sleep(wait)


def _wait_schedulable(kube: KubeClient, count: int, reporter: Reporter,
                      timeout_s: float) -> None:
    """Until (nearly) every kwok node is Ready and schedulable (no not-ready taint), and the
    TTL controller has annotated every node (its one pass over a new fleet: until then it
    patches nodes in the jobs' window)."""
    deadline = time.monotonic() + timeout_s
    while True:
        items = kube.get("/api/v1/nodes", labelSelector="type=kwok")["items"]
        ready = sum(1 for n in items if node_schedulable(n))
        settled = sum(1 for n in items
                      if TTL_ANNOTATION in (n["metadata"].get("annotations") or {}))
        reporter.advance(ready, status="schedulable", ttl_annotated=settled)
        # A few of thousands of kwok nodes may miss a lease renewal on a busy machine and
        # flap to NotReady; the operator skips those like any node that is not Ready.
        if ready >= count * SCHEDULABLE_FRACTION and settled >= len(items):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {ready}/{count} kwok nodes schedulable after"
                               f" {timeout_s:.0f} s (see the kwok and controller-manager logs)")
        time.sleep(5.0)  # each look lists every node


def _wait_operator(proc: ManagedProcess, audit_log: Path, timeout_s: float = 180.0) -> None:
    """Until the operator watches the jobs and the nodes (its watch requests are in the audit
    log) and has gone idle (its start-up lists indexed). kopf handles no job before its indexes
    are filled: a job created earlier waits for the operator's start-up, not for a decision."""
    deadline = time.monotonic() + timeout_s
    while not _watching(audit_log, {PLURAL, "nodes"}):
        proc.check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the operator did not watch {PLURAL} and nodes within"
                               f" {timeout_s:.0f} s; see {proc.log_path}")
        time.sleep(0.2)
    before = read_proc(proc.pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = read_proc(proc.pid)
        if before is None or now is None or now.cpu_s - before.cpu_s < IDLE_CPU_S:
            return
        before = now


# CPU seconds per second below which the operator counts as idle (kopf's own housekeeping).
IDLE_CPU_S = 0.05


def _watching(audit_log: Path, resources: set[str]) -> bool:
    """Whether the operator has opened a watch on each of `resources`."""
    if not audit_log.is_file():
        return False
    seen = set()
    for line in audit_log.read_text(errors="replace").splitlines():
        if '"verb":"watch"' in line:
            seen |= {r for r in resources if f'"resource":"{r}"' in line}
    return seen == resources


def run_bench(config: OperatorBenchConfig, reporter: Reporter, *, command: str,
              run_dir: Path | None = None) -> OperatorBenchResult:
    """Start the cluster, the nodes and the operator; run the jobs; measure; tear down."""
    from edgetrain.workloads.models import workload_cost

    boards = [board_profile(b).board for b in config.boards]
    bad = [b for b in boards if board_profile(b).kind != "jetson"]
    if bad:
        raise ValueError(f"--boards: {bad} are not Jetson boards")
    info = DATASETS[DATASET]
    cost = workload_cost(MODEL, tuple(info.input_shape), info.num_classes)
    names = [f"bench-{i:05d}" for i in range(config.jobs)]
    manifests = [job_manifest(n, i, config.power_limits_w, config.seeds)
                 for i, n in enumerate(names)]
    specs = {m["metadata"]["name"]: PowerAwareTrainingJobSpec.model_validate(m["spec"])
             for m in manifests}
    counts = node_counts(config.nodes, boards)
    root = run_dir or Path(tempfile.mkdtemp(prefix="edgetrain-bench-operator-"))
    reporter.event("cluster", run_dir=str(root))
    with _cluster(root, config, profiling=config.apiserver_profile_s > 0) as cluster, \
            cluster.client() as kube:
        nodes: dict[str, tuple[str, str | None]] = {}
        bodies = []
        for board, count in counts.items():
            short = board.removeprefix("jetson-")
            for i in range(count):
                name = f"{short}-{i:05d}"
                bodies.append(_registered(board_node(name, board)))
                nodes[name] = (board, board_profile(board).l4t)
        # By default room for every estimate at once: the bench measures the operator, not a
        # queue on a fake server. --server-gpus 1 --servers k: the estimates' fan-out.
        gpus = config.server_gpus or config.jobs * len(BATCH_SIZES) * config.seeds + 8
        for i in range(config.servers):
            bodies.append(_registered(board_node(f"gpu-server-{i}", "gpu-server",
                                              pods=config.jobs + 110, gpus=gpus)))
        reporter.start("nodes", total=len(bodies))
        _create_paced(kube, bodies, config.lease_duration_s / 4)
        _wait_schedulable(kube, len(bodies), reporter,
                          timeout_s=max(300.0, len(bodies) * 0.5))
        node_list_mb = node_list_bytes(kube) / MIB
        apply_crds(kube)
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": NAMESPACE}})
        # The worker identity the chart gives an enabled job namespace (worker.namespaces);
        # the operator creates no RBAC and fails jobs in a namespace without it. No RoleBinding:
        # the bench's fake worker publishes with its own client, not as the pods.
        kube.create(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "edgetrain-worker", "namespace": NAMESPACE}})
        kubeconfig = operator_kubeconfig(kube, cluster.pki, root / "operator.kubeconfig")
        argv = [sys.executable, "-m", "edgetrain", "operator", "--kubeconfig", str(kubeconfig)]
        if config.poll_interval_s is not None:
            argv += ["--poll-interval", str(config.poll_interval_s)]
        decision_log = root / "logs" / "decisions.jsonl"
        env = {**os.environ, "EDGETRAIN_OPERATOR_DECISION_LOG": str(decision_log)}
        if config.operator_src is not None:
            env["PYTHONPATH"] = config.operator_src
        # `python -m` puts its working folder first on sys.path: run it from the source tree.
        src = Path(config.operator_src) if config.operator_src is not None else None
        operator = ManagedProcess("operator", argv, root / "logs" / "operator.log",
                                  env=env, cwd=src).start()
        tracker = Tracker(names, runs=len(BATCH_SIZES) * config.seeds)
        watches = _Watches(kube)
        leases = LeaseLapses()
        not_ready = _Counted()
        worker = FakeWorker(kube, NAMESPACE, specs, nodes, cost, config.work_s, tracker.publish)
        try:
            launched = time.monotonic()
            _wait_operator(operator, audit_log_path(root),
                           timeout_s=max(180.0, 0.2 * config.nodes))
            ready_s = time.monotonic() - launched
            pids = {"operator": operator.pid,
                    **{n: c.pid for n, c in cluster.components.items()}}
            sampler = _Sampler(pids)
            group = f"{GROUP}/{VERSION}"
            watches.add(api_path(group, PLURAL, NAMESPACE), tracker.on_job)
            watches.add(api_path("batch/v1", "jobs", NAMESPACE), tracker.on_owned)
            watches.add(api_path("apps/v1", "daemonsets", NAMESPACE), tracker.on_owned)

            def on_pod(kind: str, pod: Obj, at: float) -> None:
                worker.on_pod(kind, pod, at)
                tracker.on_pod(kind, pod, at)

            watches.add(api_path("v1", "pods", NAMESPACE), on_pod)
            watches.add(api_path("v1", "configmaps", NAMESPACE), tracker.on_configmap)
            watches.add(api_path("coordination.k8s.io/v1", "leases", "kube-node-lease"),
                        leases.on_lease)
            watches.add(api_path("v1", "events"), not_ready.on_event,
                        fieldSelector="reason=NodeNotReady")
            time.sleep(1.0)  # let the watches list before the first job appears
            baseline = _Sampler(pids)
            health_from = time.time()
            idle_before = apiserver_request_counts(kube.get_text("/metrics"))
            if config.idle_window_s > 0:
                reporter.event("baseline", idle_window_s=config.idle_window_s)
                baseline.start()
                time.sleep(config.idle_window_s)
                baseline.finish()
            idle_requests = apiserver_request_counts(kube.get_text("/metrics"))
            idle_requests.subtract(idle_before)
            load_before = os.getloadavg()[0]
            idle_rss = read_proc(operator.pid)
            requests_before = apiserver_request_counts(kube.get_text("/metrics"))
            start_epoch = time.time()
            sampler.start()
            profiler = None
            if config.apiserver_profile_s > 0:
                profiler = _profile_apiserver(kube, config.apiserver_profile_s,
                                              root / APISERVER_PROFILE, worker.errors)
            started = time.monotonic()
            _submit(kube, manifests, tracker, config.submit_workers)
            submit_s = time.monotonic() - started
            reporter.start("jobs", total=config.jobs)
            end = _wait_jobs(tracker, started + config.deadline_s, reporter, operator)
            _wait_training_seen(tracker, time.monotonic() + 30.0)
            sampler.finish()
            end_epoch = time.time()
            if profiler is not None:  # a profile longer than the jobs' window ends later
                profiler.join(timeout=config.apiserver_profile_s + 35)
            all_requests = apiserver_request_counts(kube.get_text("/metrics"))
            all_requests.subtract(requests_before)
            window = end - started
        finally:
            watches.close()
            worker.close()
            operator_peak = read_proc(operator.pid)
            operator.stop(grace_s=10.0)
        requests = read_audit(audit_log_path(root), start_epoch, end_epoch)
        op_errors = operator_log_errors(root / "logs" / "operator.log")
        seen = {n: t.seen for n, t in tracker.jobs.items() if t.seen is not None}
        figures = (operator_figures(decision_log, start_epoch, end_epoch, seen)
                   if decision_log.is_file() else None)
        health = _Health(lapsed=leases.lapsed(health_from, end_epoch),
                         not_ready=not_ready.within(health_from, end_epoch),
                         renewals=leases.renewals,
                         idle_per_s=sum(idle_requests.values()) / max(config.idle_window_s,
                                                                     1.0),
                         idle_top=dict((+idle_requests).most_common(10)))
    if run_dir is None:  # etcd's data and the audit log can be hundreds of MB
        shutil.rmtree(root, ignore_errors=True)
    idle_usage = {n: baseline.usage(n, config.idle_window_s) for n in baseline.first
                  if n != "operator"}
    result = _result(config, command, tracker, requests, sampler, window, counts,
                     node_list_mb, load_before, idle_rss, operator_peak, worker.errors,
                     op_errors, submit_s, ready_s, idle_usage, +all_requests)
    return _with_figures(result, figures, health)


@dataclass
class _Health:
    """The fleet's health over the bench's window, and its idle request rate."""

    lapsed: list[str]
    not_ready: int
    renewals: int
    idle_per_s: float
    idle_top: dict[str, int]


class _Counted:
    """Events seen by a watch, with when they happened (their lastTimestamp, unix s)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: dict[str, float] = {}

    def on_event(self, kind: str, event: Obj, at: float) -> None:
        if kind == "DELETED":
            return
        when = unix_seconds(event.get("lastTimestamp") or event.get("eventTime")
                          or event["metadata"].get("creationTimestamp"))
        if when is not None:
            with self._lock:
                self._times[str(event["metadata"]["uid"])] = when

    def within(self, start: float, end: float) -> int:
        with self._lock:
            return sum(1 for t in self._times.values() if start - 1.0 <= t <= end + 1.0)


def _with_figures(result: OperatorBenchResult, figures: OperatorFigures | None,
                  health: _Health) -> OperatorBenchResult:
    """The result with the operator's own figures and the fleet's health."""
    decided = figures.decisions if figures is not None else 0
    return result.model_copy(update={
        "operator": figures,
        "operator_decision_p95_s": figures.decision_s.p95 if figures is not None else None,
        "operator_queue_p95_s": figures.queue_s.p95 if figures is not None else None,
        "serial_requests_p95": (figures.serial_requests.p95 if figures is not None else None),
        "operator_cpu_per_decision_s": (round(result.operator_cpu_s / decided, 4)
                                        if decided else None),
        "lapsed_leases": len(health.lapsed),
        "lapsed_lease_names": health.lapsed[:20],
        "node_not_ready": health.not_ready,
        "lease_renewals": health.renewals,
        "idle_apiserver_requests_per_s": round(health.idle_per_s, 1),
        "idle_apiserver_requests_top": health.idle_top,
    })


def _profile_apiserver(kube: KubeClient, seconds: float, out: Path,
                       errors: list[str]) -> threading.Thread:
    """Take the API server's CPU profile over the next `seconds` in a thread (its answer comes
    at the end); read it with `go tool pprof -top -cum <kube-apiserver binary> <out>`."""

    def take() -> None:
        try:
            out.write_bytes(kube.get_bytes(f"/debug/pprof/profile?seconds={seconds:g}",
                                           timeout_s=seconds + 30))
        except (KubeApiError, OSError) as exc:
            errors.append(f"API server profile: {exc}")

    thread = threading.Thread(target=take, name="apiserver-profile", daemon=True)
    thread.start()
    return thread


def operator_log_errors(path: Path, limit: int = 10) -> list[str]:
    """ERROR lines of the operator's own loggers and of kopf's handler runs in its log."""
    if not path.is_file():
        return []
    errors = []
    for line in path.read_text(errors="replace").splitlines():
        fields = line.split(" ", 4)
        if len(fields) == 5 and fields[2] in ("ERROR", "CRITICAL") and fields[3].startswith(
            ("edgetrain", "kopf.objects")
        ):
            errors.append(line[:300])
    return errors[:limit]


def _submit(kube: KubeClient, manifests: list[Obj], tracker: Tracker, workers: int) -> None:
    path = api_path(f"{GROUP}/{VERSION}", PLURAL, NAMESPACE)

    def create(manifest: Obj) -> None:
        name = manifest["metadata"]["name"]
        tracker.created(name, time.monotonic())
        for attempt in range(5):
            try:
                kube.create(path, manifest)
                return
            except KubeApiError as exc:  # a fresh CRD may answer 404/429 for a moment
                if exc.code not in (0, 404, 429, 500, 503) or attempt == 4:
                    raise
                time.sleep(0.5)
                tracker.created(name, time.monotonic())

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(create, manifests))


def _wait_jobs(tracker: Tracker, deadline: float, reporter: Reporter,
               operator: ManagedProcess) -> float:
    """Until every job is final or the deadline passes; returns when the last became final."""
    total = len(tracker.jobs)
    while True:
        phases = tracker.phases()
        done = sum(phases[p] for p in FINAL)
        status = ", ".join(f"{n} {p}" for p, n in sorted(phases.items()) if p not in FINAL)
        reporter.advance(done, status=status, phases=dict(phases))
        if done == total:
            return tracker.last_final()
        operator.check()
        if time.monotonic() > deadline:
            return time.monotonic()
        time.sleep(1.0)


def _wait_training_seen(tracker: Tracker, deadline: float) -> None:
    """Until the bench's own Job watch has seen each succeeded job's training Job complete:
    the jobs' watch can deliver the phase first (two streams; a watch relisting after an
    error lags by a second or more), and the training transition is measured from that Job."""
    while tracker.training_unseen() and time.monotonic() < deadline:
        time.sleep(0.2)


def _result(config: OperatorBenchConfig, command: str, tracker: Tracker,
            requests: ApiRequests, sampler: _Sampler, window_s: float,
            counts: dict[str, int], node_list_mb: float, load_before: float,
            idle: ProcReading | None, peak: ProcReading | None,
            errors: list[str], operator_errors: list[str], submit_s: float,
            ready_s: float, idle_usage: dict[str, ComponentUsage],
            all_requests: Counter[str]) -> OperatorBenchResult:
    kinds = ("start", "efficiency", "profiles", "training")
    per_kind: dict[str, list[float | None]] = {k: [] for k in kinds}
    per_kind_write: dict[str, list[float | None]] = {k: [] for k in kinds}
    for track in tracker.jobs.values():
        for kind, value in seen_decisions(track, tracker.seen).items():
            per_kind[kind].append(value)
        for kind, value in decisions(track, tracker.published).items():
            per_kind_write[kind].append(value)
    pooled = latency_stats([v for values in per_kind.values() for v in values])
    pooled_write = latency_stats([v for values in per_kind_write.values() for v in values])
    phases = tracker.phases()
    failed = [t.message for t in tracker.jobs.values() if t.phase == "Failed"]
    op = sampler.usage("operator", window_s)
    return OperatorBenchResult(
        command=command,
        date=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        machine=machine_description(),
        load_average_before=round(load_before, 2),
        load_average_during=round(float(np.mean(sampler.loads)) if sampler.loads else 0.0, 2),
        config=config,
        node_models=counts,
        jobs_succeeded=phases["Succeeded"],
        jobs_failed=phases["Failed"],
        jobs_unfinished=len(tracker.jobs) - phases["Succeeded"] - phases["Failed"],
        phases_at_end=dict(phases),
        failure_messages=sorted(set(failed))[:5],
        wall_s=round(window_s, 1),
        submit_s=round(submit_s, 2),
        operator_ready_s=round(ready_s, 1),
        decisions=pooled.count,
        decision_p50_s=pooled.p50_s,
        decision_p95_s=pooled.p95_s,
        decision_p99_s=pooled.p99_s,
        decision_max_s=pooled.max_s,
        transitions={k: latency_stats(v) for k, v in per_kind.items()},
        api_requests=requests.total,
        api_requests_per_job=round(requests.total / config.jobs, 1),
        api_requests_per_s_mean=round(requests.mean_per_s, 1),
        api_requests_per_s_peak=round(requests.peak_per_s, 1),
        api_watches=requests.watches,
        api_status_codes=requests.status_codes,
        api_requests_top=dict(list(requests.by_verb_resource.items())[:12]),
        operator_rss_mb=round((peak.peak_rss_bytes if peak else 0) / MIB, 1),
        operator_rss_idle_mb=round((idle.rss_bytes if idle else 0) / MIB, 1),
        operator_cpu_s=op.cpu_s,
        operator_cpu_percent=op.cpu_percent,
        control_plane={n: sampler.usage(n, window_s) for n in sampler.pids if n != "operator"},
        control_plane_idle=idle_usage,
        apiserver_requests=sum(all_requests.values()),
        apiserver_requests_top=dict(all_requests.most_common(15)),
        node_list_mb=round(node_list_mb, 2),
        objects_created=dict(tracker.counts),
        estimate_phase=latency_stats([estimate_phase_s(t) for t in tracker.jobs.values()
                                      if t.estimate_jobs]),
        estimate_pods_per_node=dict(sorted(tracker.estimate_nodes.items())),
        bench_errors=errors[:10],
        operator_errors=operator_errors,
        decision_p95_s_write_clock=pooled_write.p95_s,
        transitions_write_clock={k: latency_stats(v) for k, v in per_kind_write.items()},
        apiserver_round_trip_p50_s=requests.round_trip_p50_s,
        apiserver_round_trip_p95_s=requests.round_trip_p95_s,
    )
