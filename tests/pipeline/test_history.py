"""`edgetrain run`'s history: observations as files in the cache, a corrupt one skipped with a
warning and the others kept, opting out."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from edgetrain.api import EfficiencyVector
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.api.training import DeviceUsage, TrainResult
from edgetrain.pipeline.history import (
    history_dir,
    observation_of,
    plan_input,
    planning,
    record,
)
from edgetrain.workloads.progress import Reporter

SPEC = PowerAwareTrainingJobSpec.model_validate({
    "model": {"architecture": "resnet8-w025"}, "dataset": {"name": "digits"},
    "proxyDataset": {"name": "digits", "limit": 800}, "targetAccuracy": 0.5,
    "batchSizes": [16, 64]})  # fmt: skip
PRIOR = EfficiencyVector.from_samples(
    model="resnet8-w025", dataset="digits", target_accuracy=0.5, batch_sizes=[16, 64],
    samples_to_accuracy=[3000.0, 4000.0])  # fmt: skip


def _trained(samples: int, accuracy: float = 0.6, reached: bool = True) -> TrainResult:
    usage = DeviceUsage(device_time_s=1.0, simulated=True)
    return TrainResult(samples=samples, accuracy=accuracy, reached_target=reached,
                       resumed_from_samples=0, usage=usage, curve=[])  # fmt: skip


def test_observations_are_recorded_read_back_and_a_corrupt_one_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGETRAIN_CACHE_DIR", str(tmp_path))
    first = record(observation_of(SPEC, 64, _trained(2048), None, "run-a"))
    record(observation_of(SPEC, 16, _trained(5120), None, "run-b"))
    record(observation_of(SPEC, 16, _trained(512, float("nan"), False), None, "run-diverged"))
    record(observation_of(SPEC, 16, _trained(512), "other-weights", "run-other"))
    assert first.parent == history_dir(first.parent.name) and first.name == "run-a.json"
    (first.parent / "garbage.json").write_text("{not json")
    out = io.StringIO()
    with Reporter(json_lines=True, stream=out) as reporter:
        vector, status = planning(SPEC, PRIOR, plan_input(SPEC, PRIOR, None, reporter), None,
                                  reporter)
    assert status is not None and status.observations_total == 2
    assert sorted((o.batch_size, o.samples) for o in status.observations) == [
        (16, 5120.0), (64, 2048.0)]  # fmt: skip
    assert len(status.skipped) == 3 and status.skipped[0].startswith("garbage.json")
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    warnings = [e for e in events if e["event"] == "warning"]
    assert len(warnings) == 1 and "garbage.json" in warnings[0]["message"]
    assert any(e["event"] == "history" for e in events)
    # 64 needed fewer samples than the proxy said, 16 more: the posterior favours 64 more.
    assert status.posterior_r[0] / status.posterior_r[1] > status.prior_r[0] / status.prior_r[1]
    assert vector.r == pytest.approx(status.planned_r)  # what the plan reads


def test_opting_out_reads_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGETRAIN_CACHE_DIR", str(tmp_path))
    record(observation_of(SPEC, 64, _trained(2048), None, "run-a"))
    opted = SPEC.model_copy(
        update={"strategy": SPEC.strategy.model_copy(update={"learn_from_history": False})}
    )
    learned = plan_input(opted, PRIOR, None, None)
    assert learned is None
    vector, status = planning(opted, PRIOR, learned, None, None)
    assert vector == PRIOR and status is None
