"""`decide(spec, status, world)` as a table: one row per transition, retry, failure, re-plan,
node loss, cache hit or miss and wait, with no cluster (the world is a plain snapshot)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from edgetrain.api import EfficiencyVector
from edgetrain.api.efficiency import EfficiencyPart
from edgetrain.api.history import EfficiencyObservation
from edgetrain.api.job import PowerAwareTrainingJobSpec, efficiency_cache_key
from edgetrain.api.job_status import (
    EfficiencyStatus,
    Phase,
    PhaseAttempts,
    PowerAwareTrainingJobStatus,
    ProfileStatus,
    SelectionStatus,
    TrainingStatus,
)
from edgetrain.api.profile import format_profile_csv
from edgetrain.operator import decide as dc
from edgetrain.operator import history as hist
from edgetrain.operator import manifests as mf
from edgetrain.operator import world as wd
from edgetrain.operator.phases import NodeInfo
from edgetrain.operator.settings import OperatorSettings
from edgetrain.operator.worker import PROGRESS_KEY, RESULT_KEY
from tests.conftest import FIGURE1_POINTS

NOW = 1_000_000.0
SETTINGS = OperatorSettings(retry_limit=2, retry_backoff_s=10, no_node_grace_s=300,
                            unschedulable_grace_s=600)
SPEC = PowerAwareTrainingJobSpec.model_validate({
    "model": {"architecture": "resnet8-w025"}, "dataset": {"name": "digits"},
    "proxyDataset": {"name": "digits"}, "targetAccuracy": 0.87, "powerLimitWatts": 5,
    "batchSizes": [64, 128], "budget": {"seeds": [0]},
    "placement": {"nodeSelector": {"edgetrain.io/device-model": "jetson-nano"}}})
JOB = {"metadata": {"name": "j", "namespace": "ns", "uid": "0123456789abcdef", "generation": 1,
                    "annotations": {}}}
EFF_KEY = efficiency_cache_key(SPEC, mf.weights_identity(SPEC))
EFF_CM = mf.efficiency_configmap_name(EFF_KEY)
EFF_JSON = EfficiencyVector.from_samples(
    model="resnet8-w025", dataset="digits", target_accuracy=0.87, batch_sizes=[64, 128],
    samples_to_accuracy=[40000.0, 40000.0]).model_dump_json()
PROF_KEY = mf.profile_key(SPEC, "jetson-nano", "36.4")
PROF_CM = mf.profile_configmap_name(PROF_KEY)
PROF_CSV = format_profile_csv(FIGURE1_POINTS)
DS = "j-profile-jetson-nano"
PROGRESS_CM = mf.progress_configmap_name("j")


def node(name: str, model: str = "jetson-nano", ready: bool = True) -> NodeInfo:
    return NodeInfo(name, tuple(sorted({"edgetrain.io/device-model": model,
                                        "edgetrain.io/node-kind": "jetson",
                                        "edgetrain.io/l4t": "36.4"}.items())), ready)


def job(state: str) -> dict[str, Any]:
    status = {"running": {"active": 1}, "succeeded": {"succeeded": 1},
              "failed": {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}}
    return {"metadata": {"name": "x"}, "status": status[state]}


def pod(job_name: str, exit_code: int | None = None, message: str = "",
        **labels: str) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {}} if exit_code is None else {
        "terminated": {"exitCode": exit_code, "reason": "Error", "message": message}}
    return {"metadata": {"name": f"{job_name}-pod", "creationTimestamp": "t",
                         "labels": {"job-name": job_name, **labels}},
            "status": {"containerStatuses": [{"state": state}]}}


def unschedulable_pod(job_name: str, since: str,
                      why: str = "0/3 nodes are available: 3 node(s) didn't match Pod's node"
                      " affinity/selector") -> dict[str, Any]:
    return {"metadata": {"name": f"{job_name}-pod", "labels": {"job-name": job_name}},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "lastTransitionTime": since, "message": why}]}}


def world(**kw: Any) -> wd.World:
    return wd.World(job=JOB, now_s=NOW, **kw)


def status(phase: Phase, **kw: Any) -> PowerAwareTrainingJobStatus:
    return PowerAwareTrainingJobStatus(phase=phase, **kw)


EFF = EfficiencyStatus(config_map=EFF_CM, key=EFF_KEY, cached=False)
PROF = ProfileStatus(device_model="jetson-nano", node="n1", l4t="36.4", config_map=PROF_CM,
                     key=PROF_KEY, cached=False, power_limit_watts=5.0)
SEL = SelectionStatus(node="n1", device_model="jetson-nano", batch_size=64,
                      gpu_frequency_hz=460_800_000, gpu_frequency_m_hz=461, power_watts=4.9,
                      power_limit_watts=5.0, predicted_seconds=None, relative_time=0.007,
                      objective="time")
CACHE = {EFF_CM: {"efficiency.json": EFF_JSON}, PROF_CM: {"profile.csv": PROF_CSV}}
TRAINING = dict(efficiency=EFF, profiles=[PROF], selection=SEL)
RUNNING = TrainingStatus(job="j-train-1", node="n1", attempt=1,
                         checkpoint_dir="/ckpt/ns/j-01234567/run1-b64")


HIST_KEY = hist.spec_history_key(SPEC)
HIST_CM = hist.history_configmap_name(HIST_KEY)
OPTED_OUT = SPEC.model_copy(
    update={"strategy": SPEC.strategy.model_copy(update={"learn_from_history": False})})


def observation(batch_size: int, samples: float) -> str:
    return EfficiencyObservation(
        key=HIST_KEY, model="resnet8-w025", dataset="digits", target_accuracy=0.87,
        batch_size=batch_size, samples_to_accuracy=samples, reached_target=True,
        weights=mf.weights_identity(SPEC), seed=0, job="ns.earlier.01234567",
    ).model_dump_json()


def recorded(d: wd.Decision) -> tuple[int, float, bool]:
    """The observation the decision patches into the history ConfigMap."""
    patch = next(a for a in d.actions if isinstance(a, wd.Patch) and a.name == HIST_CM)
    (entry,) = patch.body["data"].values()
    seen = EfficiencyObservation.model_validate_json(entry)
    return seen.batch_size, seen.samples_to_accuracy, seen.reached_target


def progress(samples: int, accuracy: float) -> dict[str, str]:
    line = json.dumps({"event": "progress", "samples": samples, "accuracy": accuracy,
                       "usage": {"device_time_s": 3.0, "simulated": True}})
    return {PROGRESS_KEY: line}


def kinds(d: wd.Decision) -> list[str]:
    """Actions in a compact form: 'create jobs j-estimate-0', 'event Started', …"""
    out = []
    for a in d.actions:
        if isinstance(a, wd.Create):
            out.append(f"create {a.plural} {a.body['metadata']['name']}")
        elif isinstance(a, wd.Delete):
            out.append(f"delete {a.plural} {a.name}")
        elif isinstance(a, wd.Patch):
            out.append(f"patch {a.plural} {a.name}")
        else:
            out.append(f"event {a.reason}")
    return out


# No parts ConfigMap first: the pods' applies make it (one request per part).
START_0 = ["event EstimateStarted", "create jobs j-estimate-0"]
EST_UID = "e5717a7e-0000-4000-8000-000000000001"
TAG = f"{EFF_KEY}/{EST_UID}"
TWO_SEEDS = SPEC.model_copy(update={"budget": SPEC.budget.model_copy(update={"seeds": [0, 1]})})
# The seeds are part of the cache key, so of the parts' tag.
TAG2 = f"{efficiency_cache_key(TWO_SEEDS, None)}/{EST_UID}"
EFF2_CM = mf.efficiency_configmap_name(efficiency_cache_key(TWO_SEEDS, None))


def server(name: str, gpus: int, ready: bool = True) -> NodeInfo:
    return NodeInfo(name, (("edgetrain.io/node-kind", "server"),), ready, gpus)


def width(d: wd.Decision) -> int:
    """The parallelism of the estimate Job the decision creates."""
    (create,) = [a for a in d.actions if isinstance(a, wd.Create) and a.plural == "jobs"]
    return int(create.body["spec"]["parallelism"])


def est_job(state: str, completions: int = 2) -> dict[str, Any]:
    """The Indexed estimate Job: `running` with some completions done, or finished."""
    body = job("running" if state == "partly" else state)
    body["metadata"] = {"name": "j-estimate-0", "uid": EST_UID}
    body["spec"] = {"completions": completions, "completionMode": "Indexed"}
    if state == "succeeded":
        body["status"] = {"succeeded": completions,
                          "conditions": [{"type": "Complete", "status": "True"}]}
    if state == "partly":
        body["status"] = {"succeeded": 1, "active": 1}
    return body


def part(index: int, b: int, samples: int | None, seed: int = 0, tag: str = TAG,
         best: float = 0.9) -> tuple[str, str]:
    return f"part-{index}.json", EfficiencyPart(
        tag=tag, index=index, model="resnet8-w025", dataset="digits", target_accuracy=0.87,
        batch_size=b, seed=seed, samples_to_accuracy=samples, best_accuracy=best,
        device="cpu", precision="fp32").model_dump_json()


PARTS_CM = "j-estimate-0-parts"
BOTH = dict([part(0, 64, 40000), part(1, 128, 20000)])


def merged(d: wd.Decision) -> EfficiencyVector:
    (create,) = [a for a in d.actions if isinstance(a, wd.Create) and a.plural == "configmaps"]
    return EfficiencyVector.model_validate_json(create.body["data"]["efficiency.json"])


PARTS_ROWS: list[Row] = []


@dataclass
class Row:
    name: str
    status: PowerAwareTrainingJobStatus
    world: wd.World
    phase: Phase
    actions: list[str]
    reason: str | None = None
    check: Callable[[wd.Decision], bool] = lambda _d: True
    spec: PowerAwareTrainingJobSpec | str = field(default=SPEC)
    settings: OperatorSettings = SETTINGS


PARTS_ROWS += [
    Row("estimating: parallelism is the servers' GPUs that fit, bounded by the runs",
        status(Phase.estimating), world(servers=(server("s0", 1), server("s1", 1))),
        Phase.estimating, START_0, None, lambda d: width(d) == 2
        and "2 runs, 2 at once" in d.events[0].message),
    Row("estimating: a server that is not Ready adds nothing",
        status(Phase.estimating), world(servers=(server("s0", 1), server("s1", 8, False))),
        Phase.estimating, START_0, None, lambda d: width(d) == 1),
    Row("estimating: four runs (two seeds) on eight GPUs, bounded by the chart's setting",
        status(Phase.estimating), world(servers=(server("s0", 8),)), Phase.estimating, START_0,
        None, lambda d: width(d) == 3, spec=TWO_SEEDS,
        settings=SETTINGS.model_copy(update={"estimate_parallelism": 3})),
    Row("estimating: pods of two GPUs each: a 3-GPU server holds one",
        status(Phase.estimating), world(servers=(server("s0", 3),)), Phase.estimating, START_0,
        None, lambda d: width(d) == 1, settings=SETTINGS.model_copy(update={"estimate_gpus": 2})),
    Row("estimating: pods that request no GPU: one per Ready server",
        status(Phase.estimating), world(servers=(server("s0", 0), server("s1", 0))),
        Phase.estimating, START_0, None, lambda d: width(d) == 2,
        settings=SETTINGS.model_copy(update={"estimate_gpus": 0})),
    Row("estimating: every part in: merged into the cache, as one estimate pod would",
        status(Phase.estimating, efficiency=EFF),
        world(jobs={"j-estimate-0": est_job("succeeded")}, configmaps={PARTS_CM: BOTH}),
        Phase.profiling, [f"create configmaps {EFF_CM}", "event EfficiencyReady"],
        "EfficiencyReady", lambda d: merged(d).samples_to_accuracy == [40000.0, 20000.0]
        and merged(d).r == [1.0, 0.5] and merged(d).device == "cpu"
        and d.status.efficiency is not None and d.status.efficiency.cached is False),
    Row("estimating: every part in while the Job still reports running: merge",
        status(Phase.estimating, efficiency=EFF),
        world(jobs={"j-estimate-0": est_job("partly")}, configmaps={PARTS_CM: BOTH}),
        Phase.profiling, [f"create configmaps {EFF_CM}", "event EfficiencyReady"]),
    Row("estimating: one part in, one running: wait, saying how far",
        status(Phase.estimating, efficiency=EFF),
        world(jobs={"j-estimate-0": est_job("partly")},
              configmaps={PARTS_CM: dict([part(0, 64, 40000)])}),
        Phase.estimating, [], None, lambda d: "1 of 2 runs done" in d.status.message),
    Row("estimating: no parts ConfigMap yet: wait",
        status(Phase.estimating, efficiency=EFF),
        world(jobs={"j-estimate-0": est_job("running")}), Phase.estimating, [], None,
        lambda d: "0 of 2 runs done" in d.status.message),
    Row("estimating: a part of an older Job of the same name is skipped",
        status(Phase.estimating, efficiency=EFF),
        world(jobs={"j-estimate-0": est_job("partly")}, configmaps={PARTS_CM: dict(
            [part(0, 64, 40000), part(1, 128, 20000, tag=f"{EFF_KEY}/old-uid")])}),
        Phase.estimating, [], None, lambda d: "1 of 2 runs done" in d.status.message
        and "part-1.json: of another estimate" in d.status.message),
    Row("estimating: the Job completed but a part is foreign: a failed attempt naming it",
        status(Phase.estimating, efficiency=EFF),
        world(jobs={"j-estimate-0": est_job("succeeded")}, configmaps={PARTS_CM: dict(
            [part(0, 64, 40000), part(1, 128, 20000, tag="other-key/" + EST_UID)])}),
        Phase.estimating, ["event EstimateFailed"], None,
        lambda d: "missing part-1.json" in d.status.message
        and "NotPublished" in d.status.message and d.status.attempts.estimate == 1),
    Row("estimating: a corrupt part counts as missing",
        status(Phase.estimating, efficiency=EFF),
        world(jobs={"j-estimate-0": est_job("succeeded")},
              configmaps={PARTS_CM: {**dict([part(0, 64, 40000)]), "part-1.json": "{oops"}}),
        Phase.estimating, ["event EstimateFailed"], None,
        lambda d: "part-1.json: unreadable" in d.status.message),
    Row("estimating: the Job failed with a part missing: retried like a failed pod",
        status(Phase.estimating, efficiency=EFF),
        world(jobs={"j-estimate-0": est_job("failed")},
              configmaps={PARTS_CM: dict([part(0, 64, 40000)])},
              pods=(pod("j-estimate-0", 1, "killed"),)),
        Phase.estimating, ["event EstimateFailed"], None,
        lambda d: "killed" in d.status.message and d.status.attempts.estimate == 1),
    Row("estimating: every part says the target was never reached: bad input, not retried",
        status(Phase.estimating, efficiency=EFF),
        world(jobs={"j-estimate-0": est_job("succeeded")}, configmaps={PARTS_CM: dict(
            [part(0, 64, None, best=0.61), part(1, 128, None, best=0.55)])}),
        Phase.failed, ["event BadInput"], "BadInput",
        lambda d: "best accuracy b=64: 0.610, b=128: 0.550" in d.status.message
        and "within 20000 samples" in d.status.message),
    Row("estimating: two seeds, four parts: merged per batch size (a miss: the median)",
        status(Phase.estimating, efficiency=EFF),
        world(jobs={"j-estimate-0": est_job("succeeded", 4)}, configmaps={PARTS_CM: dict([
            part(0, 64, 40000, tag=TAG2), part(1, 64, None, seed=1, tag=TAG2),
            part(2, 128, 10000, tag=TAG2), part(3, 128, 30000, seed=1, tag=TAG2)])}),
        Phase.profiling, [f"create configmaps {EFF2_CM}", "event EfficiencyReady"], None,
        lambda d: merged(d).samples_to_accuracy == [None, pytest.approx((10000 * 30000) ** 0.5)]
        and merged(d).seeds == 2, spec=TWO_SEEDS),
]


def _unobserved_planned_r() -> list[float]:
    """The r planned with no observation (the proxy's, tilted by the population prior): one
    size's observations must leave it as it is."""
    d = dc.decide(SPEC, status(Phase.selecting, efficiency=EFF, profiles=[PROF]),
                  world(nodes=(node("n1"),), configmaps=CACHE), SETTINGS)
    assert d.status.efficiency is not None and d.status.efficiency.history is not None
    return d.status.efficiency.history.planned_r

ROWS = [
    Row("pending starts: nothing but the phase, no RBAC of its own",
        status(Phase.pending), world(worker_identity=True), Phase.estimating,
        ["event Started"], "Started"),
    Row("pending in a namespace the chart did not enable fails, saying how to enable it",
        status(Phase.pending), world(worker_identity=False), Phase.failed,
        ["event NoWorkerIdentity"], "NoWorkerIdentity",
        lambda d: "worker.namespaces" in d.status.message and "helm upgrade" in d.status.message),
    Row("pending with an unknown data set fails before any pod",
        status(Phase.pending), world(), Phase.failed, ["event BadInput"], "BadInput",
        lambda d: "spec.dataset.name" in d.status.message,
        spec=SPEC.model_copy(update={"dataset": SPEC.dataset.model_copy(
            update={"name": "nope"})})),
    Row("a spec the model refuses fails as InvalidSpec",
        status(Phase.pending), world(), Phase.failed, ["event InvalidSpec"], "InvalidSpec",
        spec="spec.batchSizes: batch sizes must be unique"),
    Row("final phases do nothing", status(Phase.succeeded), world(), Phase.succeeded, []),
    Row("estimating: cache hit skips the estimate",
        status(Phase.estimating), world(configmaps=CACHE), Phase.profiling,
        ["event EfficiencyReady"], "EfficiencyReady",
        lambda d: d.status.efficiency is not None and d.status.efficiency.cached is True),
    Row("estimating: cache miss starts the estimate Job",
        status(Phase.estimating), world(), Phase.estimating, START_0,
        None, lambda d: width(d) == 1),  # no server is Ready: one pod, which waits
    Row("estimating: another job makes the same vector: wait",
        status(Phase.estimating),
        world(producers={EFF_KEY: (wd.Producer("other", "job other-estimate-0"),)}),
        Phase.estimating, [], None,
        lambda d: "waiting for job other-estimate-0" in d.status.message),
    Row("estimating: our own producer is no reason to wait",
        status(Phase.estimating),
        world(producers={EFF_KEY: (wd.Producer(JOB["metadata"]["uid"], "job x"),)}),
        Phase.estimating, START_0),
    Row("estimating: a producer of another job of the same (cut) label value is another's",
        status(Phase.estimating),
        world(producers={EFF_KEY: (wd.Producer("fedcba9876543210", "job j-estimate-0"),)}),
        Phase.estimating, [], None,
        lambda d: "waiting for job j-estimate-0" in d.status.message),
    Row("estimating: a running estimate changes nothing",
        status(Phase.estimating, efficiency=EFF),
        world(jobs={"j-estimate-0": job("running")}), Phase.estimating, []),
    Row("estimating: a failed estimate is retried after a back-off",
        status(Phase.estimating), world(jobs={"j-estimate-0": job("failed")},
                                        pods=(pod("j-estimate-0", 1, "oom"),)),
        Phase.estimating, ["event EstimateFailed"], None,
        lambda d: d.status.attempts.estimate == 1
        and d.status.attempts.next_retry_at == NOW + 10 and "oom" in d.status.message),
    Row("estimating: the retry waits for its time",
        status(Phase.estimating, attempts=PhaseAttempts(estimate=1, next_retry_at=NOW + 5)),
        world(), Phase.estimating, []),
    Row("estimating: the next attempt gets the next Job name",
        status(Phase.estimating, attempts=PhaseAttempts(estimate=1, next_retry_at=NOW - 1)),
        world(jobs={"j-estimate-0": job("failed")}), Phase.estimating,
        ["event EstimateStarted", "create jobs j-estimate-1"], None,
        lambda d: d.status.attempts.next_retry_at is None),
    Row("estimating: the last retry fails the job",
        status(Phase.estimating, attempts=PhaseAttempts(estimate=2)),
        world(jobs={"j-estimate-2": job("failed")}, pods=(pod("j-estimate-2", 1, "boom"),)),
        Phase.failed, ["event RetryLimitReached"], "RetryLimitReached",
        lambda d: "attempt 3 of 3" in d.status.message),
    Row("estimating: an unreachable target is bad input, not retried, and says what to change",
        status(Phase.estimating),
        world(jobs={"j-estimate-0": job("failed")}, pods=(pod(
            "j-estimate-0", 2, "no batch size reached target accuracy 0.87 on 'digits' within"
            " 2048 samples (best accuracy b=64: 0.610, b=128: 0.550); raise the sample budget"
            " (--sample-budget / budget.estimateSamples) or lower the target"
            " (--target-accuracy / targetAccuracy)"),)),
        Phase.failed, ["event BadInput"], "BadInput",
        lambda d: all(s in d.events[0].message for s in (
            "best accuracy b=64: 0.610", "within 2048 samples", "budget.estimateSamples",
            "targetAccuracy"))),
    Row("estimating: a Job that succeeded without publishing is a failed attempt",
        status(Phase.estimating), world(jobs={"j-estimate-0": job("succeeded")}),
        Phase.estimating, ["event EstimateFailed"], None,
        lambda d: "without writing" in d.status.message),
    Row("estimating: published by our Job: not a cache hit",
        status(Phase.estimating, efficiency=EFF),
        world(configmaps=CACHE, jobs={"j-estimate-0": job("succeeded")}), Phase.profiling,
        ["event EfficiencyReady"], "EfficiencyReady",
        lambda d: d.status.efficiency is not None and d.status.efficiency.cached is False),
    *PARTS_ROWS,
    Row("estimating: a pod no node takes for too long fails the job",
        status(Phase.estimating, efficiency=EFF),
        world(jobs={"j-estimate-0": job("running")},
              pods=(unschedulable_pod("j-estimate-0", "1970-01-01T00:00:00Z"),)),
        Phase.failed, ["delete jobs x", "event Unschedulable"], "Unschedulable",
        lambda d: "didn't match Pod's node affinity" in d.status.message),
    Row("estimating: a pod that waits for a busy GPU is queueing: it waits",
        status(Phase.estimating, efficiency=EFF),
        world(jobs={"j-estimate-0": job("running")},
              pods=(unschedulable_pod("j-estimate-0", "1970-01-01T00:00:00Z",
                                      "0/3 nodes are available: 1 Insufficient nvidia.com/gpu,"
                                      " 2 node(s) didn't match Pod's node affinity/selector"),)),
        Phase.estimating, [], None, lambda d: "waits for resources" in d.status.message),
    Row("estimating: unschedulable for less than the grace: wait",
        status(Phase.estimating, efficiency=EFF),
        world(jobs={"j-estimate-0": job("running")},
              pods=(unschedulable_pod("j-estimate-0", "1970-01-12T13:40:00Z"),)),
        Phase.estimating, ["event Unschedulable"], None,
        lambda d: "fails after 600 s" in d.status.message
        and d.status.conditions[-1].type == "WorkerBlocked"),
    Row("profiling: no matching node yet: wait, remembering since when",
        status(Phase.profiling, efficiency=EFF), world(nodes=(node("o1", "jetson-orin"),)),
        Phase.profiling, [], None,
        lambda d: d.status.attempts.waiting_for_node_since == NOW
        and "fails after 300 s" in d.status.message),
    Row("profiling: no matching node within the grace: Failed, naming what exists",
        status(Phase.profiling, efficiency=EFF,
               attempts=PhaseAttempts(waiting_for_node_since=NOW - 301)),
        world(nodes=(node("o1", "jetson-orin"), node("o2", "jetson-orin", ready=False))),
        Phase.failed, ["event NoMatchingNode"], "NoMatchingNode",
        lambda d: all(s in d.status.message for s in (
            "'edgetrain.io/device-model': 'jetson-nano'", "jetson-orin (1 of 2 Ready)",
            "set spec.placement.nodeSelector"))),
    Row("profiling: cache miss starts one DaemonSet per device model",
        status(Phase.profiling, efficiency=EFF,
               attempts=PhaseAttempts(waiting_for_node_since=NOW - 30)),
        world(nodes=(node("n2"), node("n1"))), Phase.profiling,
        ["event ProfilingStarted", f"create daemonsets {DS}"], None,
        lambda d: d.status.profiles[0].node == "n1"
        and d.status.attempts.waiting_for_node_since is None),
    Row("profiling: cache hit goes on to Selecting",
        status(Phase.profiling, efficiency=EFF), world(nodes=(node("n1"),), configmaps=CACHE),
        Phase.selecting, ["event ProfilesReady"], "ProfilesReady",
        lambda d: d.status.profiles[0].cached is True),
    Row("profiling: our DaemonSet published: delete it, not a cache hit",
        status(Phase.profiling, efficiency=EFF,
               profiles=[PROF.model_copy(update={"cached": None})]),
        world(nodes=(node("n1"),), configmaps=CACHE, daemonsets={DS: {}}), Phase.selecting,
        [f"delete daemonsets {DS}", "event ProfilesReady"], "ProfilesReady",
        lambda d: d.status.profiles[0].cached is False),
    Row("profiling: another job profiles the same LUT: wait",
        status(Phase.profiling, efficiency=EFF),
        world(nodes=(node("n1"),),
              producers={PROF_KEY: (wd.Producer("other", "daemonset other-profile"),)}),
        Phase.profiling, [], None, lambda d: "waiting for daemonset other" in d.status.message),
    Row("profiling: restarts past the limit fail the job and remove the DaemonSet",
        status(Phase.profiling, efficiency=EFF),
        world(nodes=(node("n1"),), daemonsets={DS: {}}, pods=({
            "metadata": {"name": "p", "labels": {"edgetrain.io/phase": "profile",
                                                 "edgetrain.io/device-model": "jetson-nano"}},
            "status": {"containerStatuses": [{"restartCount": 3, "lastState": {
                "terminated": {"exitCode": 1, "message": "sensor"}}}]}},)),
        Phase.failed, ["event RetryLimitReached", f"delete daemonsets {DS}"],
        "RetryLimitReached"),
    Row("selecting: the plan of the paper's Figure 1",
        status(Phase.selecting, efficiency=EFF, profiles=[PROF]),
        world(nodes=(node("n1"),), configmaps=CACHE), Phase.training, ["event Planned"],
        "Planned", lambda d: d.status.selection is not None
        and (d.status.selection.batch_size, d.status.selection.gpu_frequency_hz)
        == (64, 460_800_000)),
    Row("selecting: earlier jobs' observations correct r; a corrupt one is skipped and named",
        status(Phase.selecting, efficiency=EFF, profiles=[PROF]),
        world(nodes=(node("n1"),), configmaps={**CACHE, HIST_CM: {
            "a.json": observation(128, 30_000.0), "c.json": observation(64, 90_000.0),
            "b.json": "{broken"}}),
        Phase.training, ["event ObservationSkipped", "event Planned"], "Planned",
        lambda d: d.status.efficiency is not None and d.status.efficiency.history is not None
        and d.status.efficiency.history.observations_total == 2
        and d.status.efficiency.history.posterior_r != d.status.efficiency.history.prior_r
        and d.status.efficiency.history.sources.observations == 2
        and d.status.efficiency.history.gate is not None
        and not d.status.efficiency.history.gate.explored
        and d.status.efficiency.history.skipped[0].startswith("b.json")),
    Row("selecting: one size's observations say how hard the target is, not which size",
        status(Phase.selecting, efficiency=EFF, profiles=[PROF]),
        world(nodes=(node("n1"),), configmaps={**CACHE, HIST_CM: {
            "a.json": observation(128, 30_000.0)}}),
        Phase.training, ["event Planned"], "Planned",
        lambda d: d.status.efficiency is not None and d.status.efficiency.history is not None
        and d.status.efficiency.history.planned_r == pytest.approx(_unobserved_planned_r())
        and d.status.selection is not None and d.status.selection.batch_size == 64),
    Row("selecting: opted out of learning: the proxy's r, no history in status",
        status(Phase.selecting, efficiency=EFF, profiles=[PROF]),
        world(nodes=(node("n1"),), configmaps={**CACHE, HIST_CM: {"b.json": "{broken"}}),
        Phase.training, ["event Planned"], "Planned",
        lambda d: d.status.efficiency is not None and d.status.efficiency.history is None,
        spec=OPTED_OUT),
    Row("selecting: an idle node is preferred over a busy one",
        status(Phase.selecting, efficiency=EFF, profiles=[PROF]),
        world(nodes=(node("n1"), node("n2")), configmaps=CACHE, training_load={"n1": 1}),
        Phase.training, ["event Planned"], "Planned",
        lambda d: d.status.selection is not None and d.status.selection.node == "n2"),
    Row("selecting: a limit below every profiled point is Infeasible and says what to raise",
        status(Phase.selecting, efficiency=EFF, profiles=[PROF]),
        world(nodes=(node("n1"),), configmaps=CACHE), Phase.failed, ["event Infeasible"],
        "Infeasible", lambda d: all(s in d.status.message for s in (
            "power limit of 3 W", "raise spec.powerLimitWatts to at least 4.1 W"))),
    Row("selecting: the efficiency ConfigMap vanished: estimate again",
        status(Phase.selecting, efficiency=EFF, profiles=[PROF]),
        world(nodes=(node("n1"),), configmaps={PROF_CM: CACHE[PROF_CM]}), Phase.estimating,
        ["event CacheMissing"], "CacheMissing"),
    Row("selecting: a profile vanished: profile again",
        status(Phase.selecting, efficiency=EFF, profiles=[PROF]),
        world(nodes=(node("n1"),), configmaps={EFF_CM: CACHE[EFF_CM]}), Phase.profiling,
        ["event CacheMissing"], "CacheMissing"),
    Row("selecting: every candidate node lost: wait within the grace",
        status(Phase.selecting, efficiency=EFF, profiles=[PROF],
               training=TrainingStatus(nodes_lost=["n1"])),
        world(nodes=(node("n1"),), configmaps=CACHE), Phase.selecting, [], None,
        lambda d: "lost: ['n1']" in d.status.message),
    Row("selecting: every candidate node lost past the grace: Failed",
        status(Phase.selecting, efficiency=EFF, profiles=[PROF],
               training=TrainingStatus(nodes_lost=["n1"]),
               attempts=PhaseAttempts(waiting_for_node_since=NOW - 400)),
        world(nodes=(node("n1"),), configmaps=CACHE), Phase.failed, ["event NoCandidateNode"],
        "NoCandidateNode"),
    Row("training: starts the Job on the chosen node, after its progress ConfigMap",
        status(Phase.training, **TRAINING), world(nodes=(node("n1"),)), Phase.training,
        ["event TrainingStarted", f"create configmaps {PROGRESS_CM}", "create jobs j-train-1"],
        None,
        lambda d: d.status.training is not None and d.status.training.job == "j-train-1"
        and (d.status.training.checkpoint_dir or "").endswith("run1-b64")),
    Row("training: progress reaches the status and the pod's annotations",
        status(Phase.training, training=RUNNING, **TRAINING),
        world(nodes=(node("n1"),), jobs={"j-train-1": job("running")},
              pods=(pod("j-train-1"),), configmaps={PROGRESS_CM: progress(512, 0.5)}),
        Phase.training, ["patch pods j-train-1-pod"], None,
        lambda d: d.status.training is not None and d.status.training.samples == 512
        and d.status.training.pod == "j-train-1-pod"),
    Row("training: the Job succeeded",
        status(Phase.training, training=RUNNING, **TRAINING),
        world(nodes=(node("n1"),), jobs={"j-train-1": job("succeeded")},
              configmaps={PROGRESS_CM: {RESULT_KEY: progress(4096, 0.9)[PROGRESS_KEY]}}),
        Phase.succeeded, [f"create configmaps {HIST_CM}", f"patch configmaps {HIST_CM}",
                          "event TargetReached"], "TargetReached",
        lambda d: "simulated" in d.status.message and d.status.finished_at is not None
        and recorded(d) == (64, 4096.0, True)),
    Row("training: the result's interpolated crossing and noise scale are what is recorded",
        status(Phase.training, training=RUNNING, **TRAINING),
        world(nodes=(node("n1"),), jobs={"j-train-1": job("succeeded")},
              configmaps={PROGRESS_CM: {RESULT_KEY: json.dumps({
                  "event": "result", "samples": 4096, "accuracy": 0.9, "reached_target": True,
                  "samples_to_target": 3900.5, "gradient_noise_scale": 87.0})}}),
        Phase.succeeded, [f"create configmaps {HIST_CM}", f"patch configmaps {HIST_CM}",
                          "event TargetReached"], "TargetReached",
        lambda d: recorded(d) == (64, 3900.5, True) and d.status.training is not None
        and d.status.training.gradient_noise_scale == 87.0),
    Row("training: opted out of learning, the Job succeeded: nothing recorded",
        status(Phase.training, training=RUNNING, **TRAINING),
        world(nodes=(node("n1"),), jobs={"j-train-1": job("succeeded")},
              configmaps={PROGRESS_CM: {RESULT_KEY: progress(4096, 0.9)[PROGRESS_KEY]}}),
        Phase.succeeded, ["event TargetReached"], "TargetReached", spec=OPTED_OUT),
    Row("training: a re-plan changed b (samples carried over): nothing recorded",
        status(Phase.training, training=RUNNING.model_copy(update={"carried_samples": 512}),
               **TRAINING),
        world(nodes=(node("n1"),), jobs={"j-train-1": job("succeeded")}),
        Phase.succeeded, ["event TargetReached"], "TargetReached"),
    Row("training: the sample budget ran out (exit 4): not retried, says what to raise",
        status(Phase.training, training=RUNNING, **TRAINING),
        world(nodes=(node("n1"),), jobs={"j-train-1": job("failed")},
              pods=(pod("j-train-1", 4),)),
        Phase.failed, [f"create configmaps {HIST_CM}", f"patch configmaps {HIST_CM}",
                       "event BudgetExhausted"], "BudgetExhausted",
        lambda d: "spec.budget.trainSamples" in d.status.message and recorded(d)[2] is False),
    Row("training: a crash is retried with a new Job",
        status(Phase.training, training=RUNNING, **TRAINING),
        world(nodes=(node("n1"),), jobs={"j-train-1": job("failed")},
              pods=(pod("j-train-1", 1, "x" * 5000),)),
        Phase.training, ["event TrainFailed", "delete jobs j-train-1"], None,
        lambda d: d.status.training is not None and d.status.training.job is None
        and len(str(d.status.wire()["message"])) <= 1024),
    Row("training: a recorded Job not there is made again, as recorded (same name and"
        " announcement: a replica wrote the status and died before it made the Job)",
        status(Phase.training, training=RUNNING, **TRAINING), world(nodes=(node("n1"),)),
        Phase.training, ["event TrainingStarted", f"create configmaps {PROGRESS_CM}",
                         "create jobs j-train-1"], None,
        lambda d: d.status.training is not None and d.status.training.job == "j-train-1"
        and d.status.training.attempt == 1
        and d.status.training.checkpoint_dir == RUNNING.checkpoint_dir),
    Row("training: a lower limit the profiles cover re-plans from them",
        status(Phase.training, training=RUNNING, **TRAINING),
        world(nodes=(node("n1"),), configmaps={PROGRESS_CM: progress(256, 0.4)}),
        Phase.selecting, ["delete jobs j-train-1", f"patch configmaps {PROGRESS_CM}",
                          "event PowerLimitChanged"], "PowerLimitChanged",
        lambda d: d.status.training is not None and d.status.training.segment == 1
        and d.status.training.samples == 256,
        spec=SPEC.model_copy(update={"power_limit_watts": 4.5})),
    Row("training: a higher limit than the frontier was cut at profiles again",
        status(Phase.training, training=RUNNING, **TRAINING), world(nodes=(node("n1"),)),
        Phase.profiling, ["delete jobs j-train-1", f"patch configmaps {PROGRESS_CM}",
                          "event PowerLimitChanged"], "PowerLimitChanged",
        spec=SPEC.model_copy(update={"power_limit_watts": 7.0})),
    Row("training: the node went NotReady: reschedule from the checkpoint",
        status(Phase.training, training=RUNNING, **TRAINING),
        world(nodes=(node("n1", ready=False),)), Phase.selecting,
        ["delete jobs j-train-1", f"patch configmaps {PROGRESS_CM}", "event NodeLost"],
        "NodeLost", lambda d: d.status.training is not None
        and d.status.training.nodes_lost == ["n1"] and "not Ready" in d.status.message),
    Row("training: the node is gone",
        status(Phase.training, training=RUNNING, **TRAINING), world(), Phase.selecting,
        ["delete jobs j-train-1", f"patch configmaps {PROGRESS_CM}", "event NodeLost"],
        "NodeLost", lambda d: "is gone" in d.status.message),
    Row("training: no plan in status: plan again",
        status(Phase.training), world(), Phase.selecting, ["event NoSelection"], "NoSelection"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_decide(row: Row) -> None:
    spec = row.spec
    if row.name.startswith("selecting: a limit below"):
        spec = SPEC.model_copy(update={"power_limit_watts": 3.0})
    before = row.status.model_dump()
    got = dc.decide(spec, row.status, row.world, row.settings)
    assert row.status.model_dump() == before, "decide must not modify its input"
    assert got.status.phase is row.phase, got.status.message
    assert kinds(got) == row.actions
    if row.reason is not None:
        assert got.status.reason == row.reason
    assert row.check(got), got.status.model_dump()


def test_same_world_same_decision() -> None:
    """Pure: the same inputs give the same status and actions (timestamps aside)."""
    row = ROWS[5]
    a = dc.decide(SPEC, row.status, row.world, SETTINGS)
    b = dc.decide(SPEC, row.status, row.world, SETTINGS)
    assert a.actions == b.actions and a.status == b.status


def test_grace_zero_fails_at_once() -> None:
    settings = SETTINGS.model_copy(update={"no_node_grace_s": 0.0})
    got = dc.decide(SPEC, status(Phase.profiling, efficiency=EFF), world(), settings)
    assert got.status.phase is Phase.failed and got.status.reason == "NoMatchingNode"
    assert "no Jetson node" in got.status.message


def test_world_node_lookup() -> None:
    w = replace(world(), nodes=(node("a"), node("b")))
    assert w.node("b") == node("b") and w.node("c") is None
    assert (w.name, w.namespace) == ("j", "ns")


def _worker_args(d: wd.Decision) -> list[str]:
    (create,) = [a for a in d.actions if isinstance(a, wd.Create) and a.plural == "jobs"]
    return list(create.body["spec"]["template"]["spec"]["containers"][0]["args"])


FAULTS_ON = SETTINGS.model_copy(update={"fault_injection": True})
START_ESTIMATE = (status(Phase.estimating), world())
START_TRAINING = (status(Phase.training, **TRAINING), world(nodes=(node("n1"),)))


@pytest.mark.parametrize(("annotation", "settings", "start", "release"), [
    ("train", FAULTS_ON, START_TRAINING, "j-release-train"),
    ("estimate, train", FAULTS_ON, START_ESTIMATE, "j-release-estimate"),
    ("train", FAULTS_ON, START_ESTIMATE, None),  # only the phases named
    ("estimate", FAULTS_ON, START_TRAINING, None),
    ("train", SETTINGS, START_TRAINING, None),  # honoured only with fault injection on
    (None, FAULTS_ON, START_TRAINING, None),
    ("profile,train", FAULTS_ON, START_TRAINING, "j-release-train"),
])
def test_injected_hold_reaches_the_worker(
    annotation: str | None, settings: OperatorSettings,
    start: tuple[PowerAwareTrainingJobStatus, wd.World], release: str | None,
) -> None:
    """`edgetrain.io/inject-hold` names phases whose worker pauses until a release ConfigMap."""
    before, w = start
    annotations = {} if annotation is None else {"edgetrain.io/inject-hold": annotation}
    w = replace(w, job={**JOB, "metadata": {**JOB["metadata"], "annotations": annotations}})
    args = _worker_args(dc.decide(SPEC, before, w, settings))
    if release is None:
        assert "--hold-at-progress" not in args
    else:
        sep = args.index("--")
        assert args[args.index("--hold-at-progress") + 1] == release
        assert args.index("--hold-at-progress") < sep  # the worker's option, not the workload's
