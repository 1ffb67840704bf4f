"""status.training records the device and precision a training pod reports (no cluster)."""

from __future__ import annotations

import json

from edgetrain.api.job_status import PowerAwareTrainingJobStatus, TrainingStatus
from edgetrain.api.training import TrainingEvent
from edgetrain.operator.phases import apply_progress


def event(**fields: object) -> TrainingEvent:
    parsed = TrainingEvent.from_line(json.dumps(fields))
    assert parsed is not None, fields
    return parsed


def test_progress_and_result_events_set_device_and_precision() -> None:
    training = TrainingStatus()
    apply_progress(training, event(event="progress", samples=64))
    assert training.device is None  # an older trainer says nothing: nothing is invented
    progress = event(event="progress", samples=128, device="cuda:0", precision="bf16")
    apply_progress(training, progress)
    assert (training.device, training.precision) == ("cuda:0", "bf16")
    result = event(event="result", samples=256, device="cpu", precision="fp32",
                   reached_target=True, usage={"device_time_s": 2.0})
    apply_progress(training, result)
    assert (training.device, training.precision, training.samples) == ("cpu", "fp32", 256)
    wire = PowerAwareTrainingJobStatus(training=training).wire()
    assert wire["training"]["device"] == "cpu" and wire["training"]["precision"] == "fp32"


def test_trainer_lines_that_are_not_events_are_ignored() -> None:
    assert TrainingEvent.from_line('{"event": "start", "what": "train", "total": 10}') is None
    assert TrainingEvent.from_line("plain text") is None
    assert TrainingEvent.from_line('{"event": "progress", "samples": 1') is None  # torn
    tick = TrainingEvent.from_line(
        '{"event": "progress", "time": 1.0, "completed": 64, "status": "acc 0.5",'
        ' "samples": 64, "accuracy": 0.5, "usage": {"device_time_s": 1.5, "simulated": true}}'
    )
    assert tick is not None and tick.usage is not None
    assert (tick.samples, tick.accuracy, tick.usage.device_time_s) == (64, 0.5, 1.5)
