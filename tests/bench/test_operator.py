"""`edgetrain bench operator`: its pieces as tables, and a tiny run on a real control plane."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgetrain.api.efficiency import EfficiencyPart
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.api.keys import ANNOTATION_BENCH_DONE
from edgetrain.bench.operator import (
    TTL_ANNOTATION,
    JobTrack,
    Tracker,
    _registered,
    decisions,
    estimate_phase_s,
    job_manifest,
    latency_stats,
    node_counts,
    seen_decisions,
)
from edgetrain.bench.operator_figures import operator_figures
from edgetrain.bench.operator_fleet import (
    OPERATOR_USER,
    LeaseLapses,
    bench_stages,
    kcm_grace_args,
    kwok_configuration,
    read_audit,
)
from edgetrain.bench.operator_worker import part_json, pod_env, worker_args
from edgetrain.cluster.kwok import board_node
from edgetrain.operator import estimate_manifests as em
from edgetrain.operator.settings import load_settings
from tests.helpers import run_edgetrain

UPSTREAM = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-ready}
spec: {resourceRef: {apiGroup: v1, kind: Pod}, selector: {matchExpressions: []}}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-complete}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .status.phase, operator: In, values: [Running]}
  delay: {durationMilliseconds: 1000}
  next: {statusTemplate: "phase: Succeeded"}
"""


def test_pod_complete_waits_for_the_bench() -> None:
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(bench_stages(UPSTREAM))}
    complete = docs["pod-complete"]["spec"]
    assert {"key": f'.metadata.annotations["{ANNOTATION_BENCH_DONE}"]',
            "operator": "Exists"} in complete["selector"]["matchExpressions"]
    assert "delay" not in complete
    assert docs["pod-ready"]["spec"]["selector"] == {"matchExpressions": []}
    with pytest.raises(RuntimeError, match="no pod-complete stage"):
        bench_stages(UPSTREAM.split("---")[0])


def test_worker_args_are_read_like_the_worker_reads_them() -> None:
    args = worker_args(["worker", "--sa-dir", "/sa", "--publish", "cm", "--file", "a.json=/w/a",
                        "--label", "k=v=w", "--progress", "p", "--", "edgetrain", "estimate",
                        "--publish", "not-mine"])
    assert (args.publish, args.files, args.labels, args.progress) == (
        "cm", ("a.json",), {"k": "v=w"}, "p")
    assert args.option("--publish") == "not-mine" and args.option("--seeds") is None


def test_a_run_of_the_indexed_estimate_publishes_its_part() -> None:
    """The pod as the Job controller makes it: the completion index in an annotation, the
    Job's uid in a label; the fake worker expands the args as the kubelet would."""
    manifest = job_manifest("bench-00001", 1, [5.0], seeds=2)
    spec = PowerAwareTrainingJobSpec.model_validate(manifest["spec"])
    patj = {"metadata": {"name": "bench-00001", "namespace": "b", "uid": "u-1"}}
    job = em.estimate_job(patj, spec, load_settings({}), key="k", attempt=0, parallelism=2)
    pod = {"metadata": {"name": "p", "labels": {"batch.kubernetes.io/controller-uid": "j-9"},
                        "annotations": {"batch.kubernetes.io/job-completion-index": "3"}},
           "spec": job["spec"]["template"]["spec"]}
    container = pod["spec"]["containers"][0]
    container["env"].append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}})
    args = worker_args(container["args"], pod_env(pod))
    assert (args.publish, args.files) == ("bench-00001-estimate-0-parts", ("part-3.json",))
    # Applied as the run's own field manager, owned by the job: one request, no conflict.
    assert args.apply_as == "edgetrain-part-3"
    assert args.owner == "edgetrain.io/v1alpha1:PowerAwareTrainingJob:bench-00001:u-1"
    part = EfficiencyPart.model_validate_json(part_json(spec, args))
    # Runs in order (16, 0), (16, 1), (64, 0), (64, 1): completion 3 is b=64, seed 1.
    assert (part.tag, part.index, part.batch_size, part.seed) == ("k/j-9", 3, 64, 1)


def test_the_estimate_phase_ends_with_its_last_part() -> None:
    tracker = Tracker(["bench-00000"])
    tracker.publish("bench-00000-estimate-0-parts", 4.0)
    tracker.publish("bench-00000-estimate-0-parts", 7.0)
    tracker.publish("edgetrain-efficiency-k", 1.0)  # not a part
    track = tracker.jobs["bench-00000"]
    assert track.parts_done == 7.0
    track.created, track.estimate_jobs = 0.0, [0.5]
    track.phase_seen = {"EstimatingEfficiency": 0.6, "Profiling": 7.2}
    track.daemonsets = [7.3]
    assert decisions(track, tracker.published)["efficiency"] == pytest.approx(0.2)
    assert estimate_phase_s(track) == pytest.approx(6.7)
    assert estimate_phase_s(JobTrack()) is None  # a cache hit ran none


@pytest.mark.parametrize(
    ("track", "published", "expected"),
    [
        # The whole path: created at 0, efficiency at 10, profiles at 20 and 22, trained by 31.
        (JobTrack(created=0.0, phase_seen={"EstimatingEfficiency": 1.5, "Profiling": 11.0,
                                           "Training": 23.5, "Succeeded": 33.0},
                  efficiency_cm="e", profile_cms=["p1", "p2"], estimate_jobs=[0.5],
                  daemonsets=[10.4, 10.6], train_jobs=[23.0], train_done=31.0),
         {"e": 10.0, "p1": 20.0, "p2": 22.0},
         {"start": 0.5, "efficiency": 0.4, "profiles": 1.0, "training": 2.0}),
        # Profiles from the cache, ready before the efficiency: no separate profile decision.
        (JobTrack(created=0.0, phase_seen={"Training": 12.0}, efficiency_cm="e",
                  profile_cms=["p1"], estimate_jobs=[0.2], train_jobs=[11.0]),
         {"e": 10.0, "p1": 5.0}, {"start": 0.2, "efficiency": 1.0}),
        # Stuck: the efficiency was published, the operator never acted.
        (JobTrack(created=0.0, phase_seen={"EstimatingEfficiency": 1.0}, efficiency_cm="e",
                  estimate_jobs=[0.3]),
         {"e": 4.0}, {"start": 0.3, "efficiency": None}),
        # The job's final phase delivered before its training Job's completion (two watch
        # streams): the operator cannot go final first, so it decided at once, not never.
        (JobTrack(created=0.0, phase_seen={"Training": 12.0, "Succeeded": 20.0},
                  efficiency_cm="e", estimate_jobs=[0.2], train_jobs=[11.0], train_done=20.4),
         {"e": 10.0}, {"start": 0.2, "efficiency": 1.0, "training": 0.0}),
        # Never created: nothing to measure.
        (JobTrack(), {}, {}),
    ],
)
def test_decision_latency_per_transition(
    track: JobTrack, published: dict[str, float], expected: dict[str, float | None]
) -> None:
    got = decisions(track, published)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == (None if value is None else pytest.approx(value)), key


def test_latency_stats_and_node_counts() -> None:
    stats = latency_stats([1.0, 2.0, None, 3.0])
    assert (stats.count, stats.undecided, stats.p50_s, stats.max_s) == (3, 1, 2.0, 3.0)
    assert latency_stats([None]).p95_s is None
    assert node_counts(10, ["a", "b", "c"]) == {"a": 4, "b": 3, "c": 3}
    assert node_counts(1, ["a", "b"]) == {"a": 1}


def test_audit_counts_each_request_of_the_operator_once(tmp_path: Path) -> None:
    def event(audit_id: str, verb: str, resource: str, stamp: str, user: str = OPERATOR_USER,
              stage: str = "ResponseComplete", code: int = 200) -> str:
        done = stamp.replace("000000Z", "250000Z")  # each answered in 0.25 s
        return json.dumps({"auditID": audit_id, "stage": stage, "verb": verb,
                           "user": {"username": user}, "objectRef": {"resource": resource},
                           "requestReceivedTimestamp": stamp, "stageTimestamp": done,
                           "responseStatus": {"code": code}})

    lines = [
        event("1", "list", "nodes", "2026-01-01T00:00:01.000000Z"),
        event("2", "watch", "pods", "2026-01-01T00:00:02.000000Z", stage="ResponseStarted"),
        event("2", "watch", "pods", "2026-01-01T00:00:02.000000Z"),
        event("3", "get", "configmaps", "2026-01-01T00:00:03.000000Z", code=404),
        event("4", "list", "nodes", "2026-01-01T00:00:04.000000Z", user="admin"),
        event("5", "list", "nodes", "2026-01-01T00:01:00.000000Z"),  # after the window
        "{torn",
    ]
    log = tmp_path / "audit.log"
    log.write_text("\n".join(lines) + "\n")
    start = 1767225600.0  # 2026-01-01T00:00:00Z
    got = read_audit(log, start, start + 10.0)
    assert (got.total, got.watches) == (3, 1)
    assert got.status_codes == {"200": 2, "404": 1}
    assert got.by_verb_resource == {"list nodes": 1, "watch pods": 1, "get configmaps": 1}
    assert got.mean_per_s == pytest.approx(0.3) and got.peak_per_s == pytest.approx(0.3)
    # The API server's own time per request, watches left out (they last their whole watch).
    assert got.round_trip_p50_s == pytest.approx(0.25)


def test_the_watch_clock_starts_when_the_bench_sees_the_input() -> None:
    """Both ends are watch deliveries: the job seen, its estimate's parts seen complete, its
    last profile seen; the vector is the operator's own write, never an input."""
    tracker = Tracker(["bench-00000"], runs=2)
    tracker.on_job("ADDED", {"metadata": {"name": "bench-00000"}, "status": {}}, 1.0)
    tracker.on_configmap("MODIFIED", {"metadata": {"name": "bench-00000-estimate-0-parts"},
                                      "data": {"part-0.json": "{}"}}, 5.0)
    tracker.on_configmap("MODIFIED", {"metadata": {"name": "bench-00000-estimate-0-parts"},
                                      "data": {"part-0.json": "{}", "part-1.json": "{}"}}, 6.0)
    tracker.on_configmap("ADDED", {"metadata": {"name": "eff"}, "data": {"e": "1"}}, 6.5)
    tracker.on_configmap("ADDED", {"metadata": {"name": "p1"}, "data": {"p": "1"}}, 9.0)
    track = tracker.jobs["bench-00000"]
    track.efficiency_cm, track.profile_cms = "eff", ["p1"]
    track.phase_seen = {"EstimatingEfficiency": 1.4, "Profiling": 6.6, "Training": 9.5}
    got = seen_decisions(track, tracker.seen)
    assert got["start"] == pytest.approx(0.4) and got["efficiency"] == pytest.approx(0.6)
    assert got["profiles"] == pytest.approx(0.5)


def test_a_lease_renewed_later_than_its_duration_lapsed() -> None:
    def lease(name: str, renewed: str, duration: int = 200) -> dict[str, Any]:
        return {"metadata": {"name": name},
                "spec": {"renewTime": renewed, "leaseDurationSeconds": duration}}

    lapses = LeaseLapses()
    lapses.on_lease("ADDED", lease("a", "2026-01-01T00:00:00.000000Z"))
    lapses.on_lease("MODIFIED", lease("a", "2026-01-01T00:00:50.000000Z"))  # on time
    lapses.on_lease("ADDED", lease("b", "2026-01-01T00:00:00.000000Z"))
    lapses.on_lease("MODIFIED", lease("b", "2026-01-01T00:04:00.000000Z"))  # 240 s: lapsed
    lapses.on_lease("ADDED", lease("c", "2026-01-01T00:00:00.000000Z"))  # never again
    start = 1767225600.0  # 2026-01-01T00:00:00Z
    assert lapses.renewals == 2
    assert lapses.lapsed(start, start + 245) == ["b", "c"]  # a renewed 195 s before the end
    assert lapses.lapsed(start, start + 100) == []  # b's ended later; c not yet over


def test_the_operator_figures_come_from_its_decision_log(tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    rows = [{"job": "ns/a", "cause": "start", "queue_s": 0.1, "decision_s": 0.3,
             "serial_requests": 1, "requests": 2, "cpu_s": 0.004, "at": 100.0},
            {"job": "ns/a", "cause": "configmap", "queue_s": 0.0, "decision_s": 0.2,
             "serial_requests": 2, "requests": 3, "cpu_s": 0.006, "at": 101.0},
            {"job": "ns/a", "cause": "poll", "queue_s": 0.0, "decision_s": None,
             "serial_requests": None, "requests": 1, "cpu_s": 0.001, "at": 102.0},
            {"job": "ns/b", "cause": "start", "queue_s": 0.0, "decision_s": 9.0,
             "serial_requests": 9, "requests": 9, "cpu_s": 0.1, "at": 500.0}]  # after the end
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n{torn")
    got = operator_figures(log, 99.0, 200.0)
    assert (got.reconciles, got.decisions, got.idle_requests) == (3, 2, 1)
    assert got.decision_s.max == pytest.approx(0.3) and got.serial_requests.max == 2
    assert set(got.by_cause) == {"start", "configmap"}


def test_the_fleet_is_registered_as_kubelets_leave_it() -> None:
    doc = yaml.safe_load(kwok_configuration(200, 64))
    assert doc["kind"] == "KwokConfiguration"
    assert (doc["options"]["nodeLeaseDurationSeconds"], doc["options"]["nodeLeaseParallelism"]
            ) == (200, 64)
    assert "--node-monitor-grace-period=200s" in kcm_grace_args(200)
    node = _registered(board_node("nano-00001", "jetson-nano"))
    meta = node["metadata"]
    assert TTL_ANNOTATION not in meta["annotations"]
    assert meta["labels"]["beta.kubernetes.io/arch"] == meta["labels"]["kubernetes.io/arch"]


def test_a_job_final_before_its_training_job_is_seen_complete_is_waited_for() -> None:
    """The jobs' watch may deliver Succeeded before the Jobs' watch delivers the training Job's
    completion (two streams): until it does, the training transition is not measured yet."""
    from edgetrain.api.keys import LABEL_JOB, LABEL_PHASE

    tracker = Tracker(["bench-00000", "bench-00001"])
    for name in tracker.jobs:
        tracker.on_job("MODIFIED", {"metadata": {"name": name},
                                    "status": {"phase": "Succeeded"}}, 3.0)
    tracker.on_job("MODIFIED", {"metadata": {"name": "bench-00001"},
                                "status": {"phase": "Failed"}}, 3.5)
    assert tracker.training_unseen() == ["bench-00000"]  # a failed job trains no further
    tracker.on_owned("MODIFIED", {"kind": "Job", "metadata": {
        "uid": "u1", "labels": {LABEL_JOB: "bench-00000", LABEL_PHASE: "train"}},
        "status": {"succeeded": 1}}, 3.2)
    assert tracker.training_unseen() == []
    assert tracker.jobs["bench-00000"].train_done == 3.2  # the training transition's start


@pytest.mark.cluster
@pytest.mark.slow
def test_tiny_run_succeeds_and_reports_its_keys(tmp_path: Path) -> None:
    """With the poll interval far beyond the deadline, every decision after a job's creation
    must come from a wake-up: an input landing, seen by the operator's watches."""
    proc = run_edgetrain("bench", "operator", "--jobs", "3", "--nodes", "20", "--work", "0.2",
                         "--servers", "2", "--server-gpus", "1",
                         "--poll-interval", "3600", "--deadline", "240", "--idle-window", "2",
                         "--apiserver-profile", "2", "--json", "--run-dir", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert {"jobs_succeeded", "decision_p95_s", "operator_rss_mb", "api_requests_per_job",
            "operator_cpu_s", "transitions", "control_plane", "serial_requests_p95",
            "operator_decision_p95_s", "lapsed_leases"} <= set(result)
    assert result["jobs_succeeded"] == 3, (result["phases_at_end"], result["failure_messages"],
                                           result["bench_errors"])
    assert result["bench_errors"] == []
    assert result["operator_errors"] == []
    assert result["node_models"] == {"jetson-nano": 5, "jetson-orin-nano": 5,
                                     "jetson-xavier-nx": 5, "jetson-agx-orin": 5}
    # Every job passed each measured transition, and the operator's requests were counted.
    assert result["transitions"]["start"]["count"] == 3
    assert result["transitions"]["training"]["count"] == 3
    assert result["decisions"] >= 9 and result["decision_p95_s"] is not None
    # The operator's own figures, from its decision log; the fleet stayed healthy.
    assert result["operator"]["decisions"] >= 12
    assert result["serial_requests_p95"] is not None and result["serial_requests_p95"] <= 3
    assert result["operator_decision_p95_s"] is not None
    assert result["apiserver_round_trip_p50_s"] is not None
    assert result["lapsed_leases"] == 0 and result["node_not_ready"] == 0
    assert result["api_requests"] > 0 and result["operator_rss_mb"] > 0
    # The idle fleet's baseline, and every client's requests: the operator's are among them.
    assert set(result["control_plane_idle"]) == set(result["control_plane"])
    assert result["control_plane_idle"]["kube-apiserver"]["cpu_s"] > 0
    assert result["apiserver_requests"] >= result["api_requests"]
    top = result["apiserver_requests_top"]
    assert len(top) == 15 and sum(top.values()) <= result["apiserver_requests"], top
    # The API server's CPU profile: pprof's gzipped protobuf.
    assert (tmp_path / "run" / "kube-apiserver-cpu.pprof").read_bytes()[:2] == b"\x1f\x8b"
    assert result["objects_created"]["Job estimate"] == 3
    assert result["objects_created"]["Job train"] == 3
    # Each estimate is an Indexed Job of two runs; the six runs went to both GPU servers (one
    # GPU each), and the last part published moved each job on (no poll).
    assert result["estimate_phase"]["count"] == 3
    assert result["transitions"]["efficiency"]["count"] == 3
    per_node = result["estimate_pods_per_node"]
    assert set(per_node) == {"gpu-server-0", "gpu-server-1"} and sum(per_node.values()) == 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--boards", "server"], "--boards: 'server' is not a Jetson board"),
        (["--boards", "nano,tx9"], "--boards: unknown board 'tx9'"),
        (["--power-limits", "5,x"], "--power-limits: expected comma-separated positive numbers"),
        (["--apiserver-profile", "30"], "--apiserver-profile writes into the run folder"),
    ],
)
def test_bad_options_exit_2_before_any_cluster(args: list[str], message: str) -> None:
    proc = run_edgetrain("bench", "operator", *args, "--json")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert proc.stdout == ""
