"""The fake worker of `edgetrain bench operator`: what the operator's pods would publish, without
running anything.

When a pod of the operator's on a kwok node runs, the fake worker waits the simulated work
time and then does what `edgetrain worker` does at the end of the real workload, with the same
code and the same arguments the pod carries (`--publish`, `--file`, `--label`, `--progress`,
with $(VAR)s expanded from the pod's environment as the kubelet does): a run of the Indexed
estimate Job publishes its part (`part-<i>.json`), a profile `profile.csv` and its metadata, a
training run publishes a progress and a result line. Then it marks the pod done, and the
bench's kwok stage completes it (exit 0), so a ConfigMap always comes before its pod succeeds,
as with the real worker. Profiling pods belong to a DaemonSet and are never completed: the real
ones hold until the operator deletes the DaemonSet.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from edgetrain.api.efficiency import EfficiencyPart, EfficiencyVector, estimate_runs
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.api.keys import ANNOTATION_BENCH_DONE, LABEL_JOB, LABEL_PHASE
from edgetrain.api.profile import ProfileMetadata, ProfilePoint, format_profile_csv
from edgetrain.api.training import DeviceUsage, TrainingEvent
from edgetrain.api.workload import WorkloadCost
from edgetrain.bench.podspec import expand_vars, field_ref
from edgetrain.device.sim.boards import BOARDS
from edgetrain.device.sim.physics import ground_truth
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path
from edgetrain.operator.worker import PROGRESS_KEY, RESULT_KEY, parse_owner, publish_files

log = logging.getLogger("edgetrain.bench.operator")


@dataclass(frozen=True)
class WorkerArgs:
    """What `edgetrain worker` was told to publish (its options before `--`), and the
    workload's command after it."""

    publish: str | None = None
    files: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    progress: str | None = None
    command: tuple[str, ...] = ()
    apply_as: str | None = None  # publish by server-side apply as this field manager
    owner: str | None = None  # API_VERSION:KIND:NAME:UID of the published ConfigMap

    def option(self, name: str) -> str | None:
        """The value of the workload's option `name` (None: absent)."""
        cmd = list(self.command)
        return cmd[cmd.index(name) + 1] if name in cmd[:-1] else None


def pod_env(pod: Obj) -> dict[str, str]:
    """The first container's environment as the kubelet would set it (values and the
    downward API's fieldRefs; the Job controller's JOB_COMPLETION_INDEX is one)."""
    env: dict[str, str] = {}
    for item in pod["spec"]["containers"][0].get("env") or []:
        ref = (item.get("valueFrom") or {}).get("fieldRef")
        if ref is not None:
            env[item["name"]] = field_ref(pod, ref["fieldPath"], "")
        elif "value" in item:
            env[item["name"]] = expand_vars(str(item["value"]), env)
    return env


def worker_args(args: list[str], env: dict[str, str] | None = None) -> WorkerArgs:
    """Parse a pod's `edgetrain worker …` arguments (the container's args), with $(VAR)
    expanded from `env` as the kubelet does."""
    args = [expand_vars(a, env or {}) for a in args]
    publish = progress = apply_as = owner = None
    files: list[str] = []
    labels: dict[str, str] = {}
    command: list[str] = []
    it = iter(args[1:] if args[:1] == ["worker"] else args)
    for arg in it:
        if arg == "--":
            command = list(it)
            break
        if arg == "--publish":
            publish = next(it, None)
        elif arg == "--file":
            files.append(next(it, "").partition("=")[0])
        elif arg == "--label":
            key, _, value = next(it, "").partition("=")
            labels[key] = value
        elif arg == "--progress":
            progress = next(it, None)
        elif arg == "--apply-as":
            apply_as = next(it, None)
        elif arg == "--owner":
            owner = next(it, None)
    return WorkerArgs(publish, tuple(files), labels, progress, tuple(command), apply_as, owner)


# --- what the workloads would have produced ---------------------------------------------------


def synthetic_samples(batch_size: int) -> int:
    """Samples to the target (synthetic: larger batches need more samples)."""
    return round(4000.0 * (1.0 + batch_size / 128.0))


def efficiency_json(spec: PowerAwareTrainingJobSpec) -> str:
    """A plausible efficiency vector for the job (what a single estimate pod publishes)."""
    sizes = list(spec.batch_sizes)
    vector = EfficiencyVector.from_samples(
        model=spec.model.architecture, dataset=spec.proxy_dataset.name,
        target_accuracy=spec.target_accuracy, batch_sizes=sizes,
        samples_to_accuracy=[float(synthetic_samples(b)) for b in sizes])
    return vector.model_dump_json()


def part_json(spec: PowerAwareTrainingJobSpec, args: WorkerArgs) -> str:
    """The part of one completion of the Indexed estimate Job (`--run-index`, `--part-of`)."""
    index, tag = args.option("--run-index"), args.option("--part-of")
    if index is None or tag is None or not index.isdigit():
        raise ValueError(f"estimate pod without --run-index/--part-of: {args.command}")
    b, seed = estimate_runs(spec.batch_sizes, spec.budget.seeds)[int(index)]
    return EfficiencyPart(
        tag=tag, index=int(index), model=spec.model.architecture,
        dataset=spec.proxy_dataset.name, target_accuracy=spec.target_accuracy, batch_size=b,
        seed=seed, samples_to_accuracy=synthetic_samples(b), best_accuracy=spec.target_accuracy,
        device="cpu", precision="fp32").model_dump_json()


def profile_files(spec: PowerAwareTrainingJobSpec, board: str, l4t: str | None,
                  cost: WorkloadCost, work_s: float) -> dict[str, str]:
    """profile.csv on the twin's physics (every batch size × GPU frequency; simulated) and its
    metadata, as `edgetrain profile` writes them."""
    freqs = list(spec.gpu_frequencies_hz or BOARDS[board].gpu_freqs_hz)
    points = []
    for b in spec.batch_sizes:
        for f in freqs:
            truth = ground_truth(board, cost, b, f)
            points.append(ProfilePoint(
                batch_size=b, gpu_freq_hz=f, time_per_sample_s=truth.time_per_sample_s,
                peak_power_w=truth.peak_power_w, mean_power_w=truth.mean_power_w))
    meta = ProfileMetadata(
        device_model=board, l4t=l4t, model=spec.model.architecture,
        input_shape=cost.input_shape, dataset=spec.dataset.name,
        batch_sizes=list(spec.batch_sizes), gpu_freqs_hz=freqs,
        strategy=spec.strategy.profiling, power_limit_w=spec.power_limit_watts,
        power_metric=spec.strategy.power_metric.value, minibatches=spec.budget.profile_minibatches,
        sample_interval_s=0.0, measured_points=len(points), grid_points=len(points),
        duration_s=work_s, simulated=True)
    return {"profile.csv": format_profile_csv(points),
            "profile.meta.json": meta.model_dump_json(indent=2)}


def training_lines(spec: PowerAwareTrainingJobSpec, work_s: float) -> tuple[str, str]:
    """A progress line and the result line of a training run that reached its target."""
    usage = DeviceUsage(device_time_s=work_s, energy_j=work_s * 4.0, peak_power_w=4.0,
                        simulated=True)
    samples = 1024
    progress = TrainingEvent(event="progress", samples=samples // 2,
                             accuracy=spec.target_accuracy / 2, usage=usage, device="cpu",
                             precision="fp32")
    result = TrainingEvent(event="result", samples=samples, accuracy=spec.target_accuracy,
                           usage=usage, device="cpu", precision="fp32", reached_target=True,
                           resumed_from_samples=0)
    return progress.model_dump_json(), result.model_dump_json()


# --- the worker ------------------------------------------------------------------------------


class Delayed:
    """Runs callables at given monotonic times on a small thread pool."""

    def __init__(self, workers: int = 8) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cond = threading.Condition()
        self._seq = 0
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fake-worker")
        self._stop = False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def at(self, when: float, fn: Callable[[], None]) -> None:
        """Run `fn` at `when` (time.monotonic())."""
        with self._cond:
            self._seq += 1
            heapq.heappush(self._heap, (when, self._seq, fn))
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stop and (
                        not self._heap or self._heap[0][0] > time.monotonic()):
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(wait)
                if self._stop:
                    return
                _, _, fn = heapq.heappop(self._heap)
            self._pool.submit(fn)

    def close(self) -> None:
        """Stop scheduling; running calls finish."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=True)


class FakeWorker:
    """Publishes what each running pod's workload would have, then lets kwok complete it."""

    def __init__(self, kube: KubeClient, namespace: str,
                 specs: dict[str, PowerAwareTrainingJobSpec],
                 nodes: dict[str, tuple[str, str | None]], cost: WorkloadCost, work_s: float,
                 on_publish: Callable[[str, float], None]) -> None:
        self.kube, self.namespace, self.specs = kube, namespace, specs
        self.nodes = nodes  # node name -> (board, L4T)
        self.cost, self.work_s = cost, work_s
        self.on_publish = on_publish  # (ConfigMap name, monotonic time before the write)
        self.errors: list[str] = []
        self._handled: set[str] = set()
        self._lock = threading.Lock()
        self._delayed = Delayed()

    def close(self) -> None:
        """Stop publishing."""
        self._delayed.close()

    def on_pod(self, kind: str, pod: Obj, seen_at: float) -> None:
        """A pod event from the bench's watch: schedule its work once it runs."""
        meta = pod["metadata"]
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            return
        if (pod.get("status") or {}).get("phase") != "Running":
            return
        with self._lock:
            if meta["uid"] in self._handled:
                return
            self._handled.add(meta["uid"])
        self._delayed.at(seen_at + self.work_s, lambda: self._finish(pod))

    def _finish(self, pod: Obj) -> None:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        try:
            spec = self.specs[labels[LABEL_JOB]]
            args = worker_args(list(pod["spec"]["containers"][0].get("args") or []),
                               pod_env(pod))
            phase = labels.get(LABEL_PHASE)
            if phase == "estimate":
                if "--run-index" in args.command:  # one run of an Indexed Job: its part
                    self._publish(args, {key: part_json(spec, args) for key in args.files})
                else:
                    self._publish(args, {"efficiency.json": efficiency_json(spec)})
                self._done(pod)
            elif phase == "profile":
                board, l4t = self.nodes[pod["spec"]["nodeName"]]
                self._publish(args, profile_files(spec, board, l4t, self.cost, self.work_s))
            elif phase == "train":
                if args.progress is None:
                    raise ValueError("training pod without --progress")
                progress, result = training_lines(spec, self.work_s)
                path = api_path("v1", "configmaps", self.namespace, args.progress)
                self.kube.patch(path, {"data": {PROGRESS_KEY: progress}}, "merge")
                self.kube.patch(path, {"data": {RESULT_KEY: result, PROGRESS_KEY: result}},
                                "merge")
                self._done(pod)
            else:
                raise ValueError(f"unknown phase label {phase!r}")
        except (KubeApiError, KeyError, ValueError, IndexError) as exc:
            message = f"pod {meta.get('name')}: {exc}"
            log.warning("fake worker: %s", message)
            with self._lock:
                self.errors.append(message)

    def _publish(self, args: WorkerArgs, data: dict[str, str]) -> None:
        if args.publish is None:
            raise ValueError("no --publish in the worker's arguments")
        missing = set(args.files) - set(data)
        if missing:
            raise ValueError(f"the bench cannot produce {sorted(missing)}")
        before = time.monotonic()
        publish_files(self.kube, self.namespace, args.publish, {k: data[k] for k in args.files},
                      args.labels, args.apply_as,
                      parse_owner(args.owner) if args.owner else None)
        self.on_publish(args.publish, before)

    def _done(self, pod: Obj) -> None:
        self.kube.patch(api_path("v1", "pods", self.namespace, pod["metadata"]["name"]),
                        {"metadata": {"annotations": {ANNOTATION_BENCH_DONE: "true"}}}, "merge")
