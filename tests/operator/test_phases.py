"""The phase machine's pure decisions: nodes, Job outcomes, retries, selection, conditions."""

from __future__ import annotations

from typing import Any

from edgetrain.api import EfficiencyVector
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.api.job_status import Phase, PowerAwareTrainingJobStatus, ProfileStatus
from edgetrain.operator import phases as ph
from tests.conftest import FIGURE1_POINTS


def _node(name: str, model: str, ready: bool = True, **labels: str) -> ph.NodeInfo:
    return ph.NodeInfo.of({
        "metadata": {"name": name, "labels": {"edgetrain.io/device-model": model,
                                              "edgetrain.io/node-kind": "jetson", **labels}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    })


def test_candidates_group_ready_matching_nodes() -> None:
    nodes = [_node("b", "nano"), _node("a", "nano"), _node("c", "orin"),
             _node("d", "orin", ready=False), _node("e", "xavier", pool="other")]
    got = ph.candidates(nodes, {"edgetrain.io/node-kind": "jetson"})
    assert [(c.device_model, c.nodes) for c in got] == [
        ("nano", ("a", "b")), ("orin", ("c",)), ("xavier", ("e",))]
    got = ph.candidates(nodes, {"edgetrain.io/node-kind": "jetson"}, frozenset({"c"}))
    assert [c.device_model for c in got] == ["nano", "xavier"]
    assert ph.least_loaded(("a", "b"), {"a": 2, "b": 1}) == "b"
    assert ph.least_loaded(("a", "b"), {}) == "a"


def test_candidates_are_memoized_per_snapshot_object_not_per_content() -> None:
    """One fleet snapshot grouped once per selector; a new snapshot (a node gone NotReady) is
    grouped again even though the memo holds the old one."""
    fleet = (_node("a", "nano"), _node("b", "orin"))
    first = ph.candidates(fleet, {"edgetrain.io/node-kind": "jetson"})
    again = ph.candidates(fleet, {"edgetrain.io/node-kind": "jetson"})
    assert again == first and again is not first  # a copy: callers may change their list
    changed = (_node("a", "nano"), _node("b", "orin", ready=False))
    assert [c.device_model for c in ph.candidates(changed, {"edgetrain.io/node-kind": "jetson"})
            ] == ["nano"]
    assert [c.device_model for c in ph.candidates(fleet, {"edgetrain.io/device-model": "orin"})
            ] == ["orin"]


def _pod(exit_code: int, message: str = "") -> dict[str, Any]:
    return {"metadata": {"creationTimestamp": "t"}, "status": {"containerStatuses": [
        {"state": {"terminated": {"exitCode": exit_code, "reason": "Error", "message": message}}}]}}


def test_job_outcome() -> None:
    assert ph.job_outcome({"status": {"active": 1}}, []).state == "running"
    assert ph.job_outcome({"status": {"succeeded": 1}}, []).state == "succeeded"
    failed = {"status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True",
                                                      "reason": "BackoffLimitExceeded"}]}}
    out = ph.job_outcome(failed, [_pod(4, "budget spent")])
    assert (out.state, out.exit_code, out.message) == ("failed", 4, "budget spent")
    assert ph.job_outcome(failed, []).reason == "BackoffLimitExceeded"


def test_an_indexed_job_is_done_when_every_completion_is() -> None:
    indexed = {"spec": {"completions": 3, "completionMode": "Indexed"}}
    running = {**indexed, "status": {"succeeded": 2, "active": 1}}
    assert ph.job_outcome(running, []).state == "running"
    assert not ph.job_finished(running)
    done = {**indexed, "status": {"succeeded": 3}}
    assert ph.job_outcome(done, []).state == "succeeded" and ph.job_finished(done)
    complete = {**indexed, "status": {"succeeded": 1, "conditions": [
        {"type": "Complete", "status": "True"}]}}
    assert ph.job_complete(complete)
    # One pod failed after another succeeded: the failure is what the outcome says.
    failed = {**indexed, "status": {"succeeded": 1, "failed": 1}}
    assert ph.job_finished(failed)
    earlier_ok = _pod(0)
    earlier_ok["metadata"]["creationTimestamp"] = "a"
    out = ph.job_outcome(failed, [earlier_ok, _pod(137, "OOMKilled")])
    assert (out.state, out.exit_code, out.message) == ("failed", 137, "OOMKilled")


def test_daemonset_failures_and_backoff() -> None:
    pod = {"status": {"containerStatuses": [{"restartCount": 2, "state": {"running": {}},
            "lastState": {"terminated": {"exitCode": 1, "message": "boom"}}}]}}
    assert ph.daemonset_failures([pod]) == (2, "exit code 1: boom")
    assert [ph.backoff_s(10, n) for n in (1, 2, 3)] == [10, 20, 40]
    assert ph.backoff_s(10, 20) == 600


SPEC = PowerAwareTrainingJobSpec.model_validate({
    "model": {"architecture": "resnet18"}, "dataset": {"name": "svhn"},
    "proxyDataset": {"name": "cifar10"}, "targetAccuracy": 0.87, "powerLimitWatts": 5,
    "batchSizes": [64, 128]})
EFF = EfficiencyVector.from_samples(model="resnet18", dataset="cifar10", target_accuracy=0.87,
                                    batch_sizes=[64, 128], samples_to_accuracy=[40000.0, 40000.0])


def test_plan_candidates_picks_the_faster_device() -> None:
    slower = [p.model_copy(update={"time_per_sample_s": p.time_per_sample_s * 2})
              for p in FIGURE1_POINTS]
    hot = [p.model_copy(update={"peak_power_w": 50.0}) for p in FIGURE1_POINTS]
    model, plan, rows = ph.plan_candidates(SPEC, EFF, {"fast": FIGURE1_POINTS, "slow": slower,
                                                       "hot": hot})
    assert model == "fast" and plan is not None
    assert (plan.batch_size, plan.gpu_freq_hz) == (64, 460_800_000)  # the paper's Figure 1
    by = {r.device_model: r for r in rows}
    assert by["hot"].error and "5" in by["hot"].error
    assert by["slow"].objective_value is not None
    assert by["slow"].objective_value > by["fast"].objective_value  # type: ignore[operator]
    assert set(ph.baselines(plan)) >= {"B1", "B2"}


def test_profiles_cover_limit() -> None:
    prof = ProfileStatus(device_model="m", node="n", config_map="c", key="k",
                         power_limit_watts=6.0)
    assert ph.profiles_cover_limit([prof], 5.0)
    assert not ph.profiles_cover_limit([prof], 7.0)
    full = prof.model_copy(update={"power_limit_watts": None})
    assert ph.profiles_cover_limit([full], 100.0)
    assert not ph.profiles_cover_limit([], 1.0)


def test_transitions_set_conditions() -> None:
    status = PowerAwareTrainingJobStatus()
    ph.transition(status, Phase.estimating, "Started", "go")
    kind, reason, msg = ph.transition(status, Phase.profiling, "EfficiencyReady", "cm x")
    assert (kind, reason) == ("Normal", "EfficiencyReady") and "→" in msg
    conds = {c.type: c for c in status.conditions}
    assert conds["EfficiencyReady"].status == "True"
    kind, _, _ = ph.transition(status, Phase.failed, "RetryLimitReached", "boom")
    conds = {c.type: c for c in status.conditions}
    assert kind == "Warning" and conds["Failed"].status == "True"
    assert conds["Ready"].status == "False" and status.finished_at
    wire = status.wire()
    assert wire["phase"] == "Failed" and "observedGeneration" not in wire


def test_place_prefers_an_idle_node_of_the_best_model() -> None:
    groups = {"fast": ("f0",), "slow": ("s0", "s1")}
    assert ph.place(["fast", "slow"], groups, {}) == ("fast", "f0")
    assert ph.place(["fast", "slow"], groups, {"f0": 1}) == ("slow", "s0")
    assert ph.place(["fast", "slow"], groups, {"f0": 1, "s0": 1}) == ("slow", "s1")
    busy = {"f0": 2, "s0": 1, "s1": 1}
    assert ph.place(["fast", "slow"], groups, busy) == ("fast", "f0")  # all busy: the best


def test_no_worker_identity_says_how_to_enable_the_namespace() -> None:
    msg = ph.no_worker_identity("vision", "edgetrain-worker")
    assert msg.startswith("namespace vision has no ServiceAccount 'edgetrain-worker'")
    assert "worker.namespaces" in msg and "worker.namespaceSelector" in msg
    assert "helm upgrade <release> charts/edgetrain --reuse-values" in msg
    assert "{...,vision}" in msg and len(msg) < 1024
