"""status.training records the device and precision a training pod reports (no cluster)."""

from __future__ import annotations

from edgetrain.api.job_status import PowerAwareTrainingJobStatus, TrainingStatus
from edgetrain.operator.reconcile import Reconciler


def test_progress_and_result_events_set_device_and_precision() -> None:
    training = TrainingStatus()
    apply = Reconciler._apply_progress  # pure: reads the event, writes the status
    reconciler = object.__new__(Reconciler)
    apply(reconciler, training, {"event": "progress", "samples": 64, "device_time_s": 1.0})
    assert training.device is None  # an older trainer says nothing: nothing is invented
    progress = {"event": "progress", "samples": 128, "device": "cuda:0", "precision": "bf16"}
    apply(reconciler, training, progress)
    assert (training.device, training.precision) == ("cuda:0", "bf16")
    result = {"event": "result", "samples": 256, "device": "cpu", "precision": "fp32",
              "reached_target": True, "usage": {"device_time_s": 2.0}}
    apply(reconciler, training, result)
    assert (training.device, training.precision, training.samples) == ("cpu", "fp32", 256)
    wire = PowerAwareTrainingJobStatus(training=training).wire()
    assert wire["training"]["device"] == "cpu" and wire["training"]["precision"] == "fp32"
