"""The verdict on an Indexed estimate's parts, and its parallelism, as tables (no cluster)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from edgetrain.api.efficiency import EfficiencyPart, EfficiencyVector, vector_from_runs
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.operator import estimate_parts as ep
from edgetrain.operator.phases import NodeInfo
from edgetrain.operator.settings import OperatorSettings

SPEC = PowerAwareTrainingJobSpec.model_validate({
    "model": {"architecture": "resnet8-w025"}, "dataset": {"name": "digits"},
    "proxyDataset": {"name": "digits"}, "targetAccuracy": 0.8, "batchSizes": [16, 64, 128],
    "budget": {"seeds": [0, 1], "estimateSamples": 4096}})
TAG = "k/uid-1"
# Runs in completion order: (16, 0), (16, 1), (64, 0), (64, 1), (128, 0), (128, 1).
RUNS = ep.runs_of(SPEC)
SAMPLES = [1000, 1400, 2000, None, 3000, 2600]


def part(i: int, samples: int | None = -1, **update: object) -> str:
    b, seed = RUNS[i] if i < len(RUNS) else (16, 0)
    body = EfficiencyPart(
        tag=TAG, index=i, model="resnet8-w025", dataset="digits", target_accuracy=0.8,
        batch_size=b, seed=seed, samples_to_accuracy=SAMPLES[i % 6] if samples == -1 else samples,
        best_accuracy=0.85, device="cpu", precision="fp32").model_dump()
    body.update(update)
    return json.dumps(body)


def parts(*indexes: int) -> dict[str, str]:
    return {f"part-{i}.json": part(i) for i in indexes}


ALL = parts(0, 1, 2, 3, 4, 5)
SINGLE = vector_from_runs(
    model="resnet8-w025", dataset="digits", target_accuracy=0.8, batch_sizes=[16, 64, 128],
    seeds=[0, 1], results={run: (s, 0.85) for run, s in zip(RUNS, SAMPLES, strict=True)})


@dataclass
class Row:
    name: str
    data: dict[str, str] | None
    state: str
    kind: str
    done: int
    check: Callable[[ep.PartsVerdict], bool] = field(default=lambda _v: True)


ROWS = [
    Row("no ConfigMap yet, running: wait", None, "running", "wait", 0),
    Row("empty, running: wait", {}, "running", "wait", 0),
    Row("some in, running: wait, saying how far", parts(0, 3), "running", "wait", 2,
        lambda v: v.progress == "2 of 6 runs done"),
    Row("all in: merged, the vector one process computes", ALL, "succeeded", "merge", 6,
        lambda v: v.vector is not None and v.vector.model_copy(
            update={"device": None, "precision": None}) == SINGLE),
    Row("all in: device and precision of the runs", ALL, "succeeded", "merge", 6,
        lambda v: v.vector is not None and (v.vector.device, v.vector.precision) == (
            "cpu", "fp32")),
    Row("runs on different devices: all of them named",
        {**ALL, "part-5.json": part(5, device="cuda:0")}, "succeeded", "merge", 6,
        lambda v: v.vector is not None and v.vector.device == "cpu, cuda:0"),
    Row("all in while the Job still runs: merge", ALL, "running", "merge", 6),
    Row("all in though the Job failed after: merge", ALL, "failed", "merge", 6),
    Row("the geometric mean over seeds; with a miss the median, a miss counting as never",
        ALL, "succeeded", "merge", 6, lambda v: v.vector is not None
        and v.vector.samples_to_accuracy == pytest.approx([(1000 * 1400) ** 0.5, None,
                                                           (3000 * 2600) ** 0.5])
        and v.vector.seeds == 2),
    Row("no run reached the target: merge with the message, no vector",
        {k: part(int(k[5]), None) for k in ALL}, "succeeded", "merge", 6,
        lambda v: v.vector is None and "no batch size reached target accuracy 0.8" in v.message
        and "within 4096 samples" in v.message and "b=16: 0.850" in v.message),
    Row("Job complete, a part missing: failed, naming it",
        parts(0, 1, 2, 4, 5), "succeeded", "failed", 5,
        lambda v: "missing part-3.json" in v.message and "5 of 6 runs published" in v.message),
    Row("Job failed, parts missing: failed", parts(0), "failed", "failed", 1),
    Row("Job complete, nothing published: failed", None, "succeeded", "failed", 0,
        lambda v: "missing part-0.json, part-1.json" in v.message),
    Row("a part of an older Job of the same name is skipped",
        {**parts(0, 1, 2, 3, 4), "part-5.json": part(5, tag="k/uid-0")}, "running", "wait", 5,
        lambda v: "part-5.json: of another estimate (k/uid-0)" in v.progress),
    Row("a part of another cache key is skipped",
        {**parts(0, 1, 2, 3, 4), "part-5.json": part(5, tag="other/uid-1")}, "succeeded",
        "failed", 5, lambda v: "of another estimate" in v.message),
    Row("corrupt JSON is skipped", {**parts(0, 1, 2, 3, 4), "part-5.json": "{not json"},
        "running", "wait", 5, lambda v: "part-5.json: unreadable" in v.progress),
    Row("a JSON list is not a part", {**parts(0, 1, 2, 3, 4), "part-5.json": "[]"},
        "running", "wait", 5, lambda v: "unreadable" in v.progress),
    Row("a part missing a field is skipped",
        {**parts(0, 1, 2, 3, 4), "part-5.json": json.dumps({"tag": TAG, "index": 5})},
        "running", "wait", 5, lambda v: "unreadable" in v.progress),
    Row("an unknown field is skipped", {**parts(0, 1, 2, 3, 4), "part-5.json": part(5, x=1)},
        "running", "wait", 5),
    Row("under another run's key: skipped, not counted twice",
        {**parts(0, 1, 2, 3, 4), "part-5.json": part(4)}, "running", "wait", 5,
        lambda v: "part-5.json: says it is run 4" in v.progress),
    Row("a duplicate of run 0 under key 5 does not complete the set",
        {**parts(0, 1, 2, 3, 4), "part-5.json": part(0)}, "succeeded", "failed", 5),
    Row("a part that trained another batch size is skipped",
        {**parts(0, 1, 2, 3, 4), "part-5.json": part(5, batch_size=16)}, "running", "wait", 5,
        lambda v: "trained b=16 seed=1, run 5 is b=128 seed=1" in v.progress),
    Row("a part that trained another seed is skipped",
        {**parts(0, 1, 2, 3, 4), "part-5.json": part(5, seed=0)}, "running", "wait", 5),
    Row("a part of another model is skipped",
        {**parts(0, 1, 2, 3, 4), "part-5.json": part(5, model="resnet18")}, "running", "wait",
        5, lambda v: "not this job's estimate" in v.progress),
    Row("a part of another target accuracy is skipped",
        {**parts(0, 1, 2, 3, 4), "part-5.json": part(5, target_accuracy=0.9)}, "running",
        "wait", 5),
    Row("an index beyond the runs is skipped", {**ALL, "part-6.json": part(6)}, "succeeded",
        "merge", 6, lambda v: "part-6.json: index 6 is beyond the 6 runs" in v.progress),
    Row("keys that are not parts are skipped", {**ALL, "notes.txt": "hello"}, "succeeded",
        "merge", 6, lambda v: "notes.txt: not a part key" in v.progress),
    Row("a negative samples count is unreadable",
        {**parts(0, 1, 2, 3, 4), "part-5.json": part(5, samples_to_accuracy=-5)}, "running",
        "wait", 5),
    Row("many missing: the message lists eight and counts the rest",
        {}, "failed", "failed", 0, lambda v: "part-5.json" in v.message
        and "part-6" not in v.message),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_parts_verdict(row: Row) -> None:
    verdict = ep.parts_verdict(row.data, tag=TAG, spec=SPEC, job_state=row.state)
    assert (verdict.kind, verdict.done, verdict.total) == (row.kind, row.done, 6), verdict
    assert row.check(verdict), verdict


def test_more_than_eight_missing_are_counted() -> None:
    many = SPEC.model_copy(update={"batch_sizes": [8, 16, 32, 64, 128]})  # ten runs
    verdict = ep.parts_verdict({}, tag=TAG, spec=many, job_state="failed")
    assert verdict.message.endswith("part-7.json and 2 more")


def server(name: str, gpus: int, ready: bool = True) -> NodeInfo:
    return NodeInfo(name, (("edgetrain.io/node-kind", "server"),), ready, gpus)


CPU = SPEC.model_copy(update={"compute": SPEC.compute.model_copy(update={"device": "cpu"})})


@pytest.mark.parametrize(("servers", "spec", "settings", "width"), [
    ((), SPEC, {}, 1),  # no server: one pod, which waits and says why
    ((server("a", 1),), SPEC, {}, 1),
    ((server("a", 1), server("b", 1)), SPEC, {}, 2),
    ((server("a", 1), server("b", 1), server("c", 1), server("d", 1)), SPEC, {}, 4),
    ((server("a", 8),), SPEC, {}, 6),  # the runs bound it
    ((server("a", 8),), SPEC, {"estimate_parallelism": 2}, 2),  # the chart's setting
    ((server("a", 8, ready=False), server("b", 1)), SPEC, {}, 1),  # NotReady: none
    ((server("a", 3),), SPEC, {"estimate_gpus": 2}, 1),  # two GPUs per pod
    ((server("a", 4), server("b", 4)), SPEC, {"estimate_gpus": 2}, 4),
    ((server("a", 0), server("b", 0), server("c", 0)), SPEC, {"estimate_gpus": 0}, 3),
    ((server("a", 0), server("b", 0)), CPU, {}, 2),  # a CPU estimate requests no GPU
    ((server("a", 0),), SPEC, {}, 1),  # a server without the device plugin: the pod waits
])
def test_parallelism(servers: tuple[NodeInfo, ...], spec: PowerAwareTrainingJobSpec,
                     settings: dict[str, int], width: int) -> None:
    assert ep.parallelism(servers, spec, OperatorSettings(**settings)) == width


def test_node_info_reads_the_allocatable_gpus() -> None:
    node = {"metadata": {"name": "s", "labels": {}},
            "status": {"allocatable": {"nvidia.com/gpu": "4", "cpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    assert NodeInfo.of(node).allocatable_gpus == 4
    assert NodeInfo.of({**node, "status": {"allocatable": {"nvidia.com/gpu": "1k"}}}
                       ).allocatable_gpus == 0
    assert NodeInfo.of({"metadata": {"name": "j"}}).allocatable_gpus == 0


def test_a_part_round_trips_and_its_vector_is_the_cache_format() -> None:
    verdict = ep.parts_verdict(ALL, tag=TAG, spec=SPEC, job_state="succeeded")
    assert verdict.vector is not None
    # The cached JSON is an EfficiencyVector like a single estimate's, readable as before.
    assert EfficiencyVector.model_validate_json(verdict.vector.model_dump_json()) == (
        verdict.vector)
    assert set(json.loads(verdict.vector.model_dump_json())) == set(
        EfficiencyVector.model_fields)
