"""Fine-tuning to the target accuracy with atomic checkpoints, so a killed run resumes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

import torch

from edgetrain.api.training import (
    DeviceUsage,
    TrainingEvent,
    TrainResult,
)
from edgetrain.api.workload_spec import TrainSpec
from edgetrain.workloads.accel import Accelerator, resolve, restore_rng_state, rng_state
from edgetrain.workloads.progress import Reporter
from edgetrain.workloads.training import (
    Task,
    TrainState,
    configure_threads,
    load_task,
    make_model,
    make_optimizer,
    train_to_target,
)
from edgetrain.workloads.weights import load_pretrained, save_state_atomic

CHECKPOINT_NAME = "checkpoint.pt"


class DeviceMeter(Protocol):
    """Accounts device time (and energy, where a power sensor exists) per minibatch."""

    def step(self, batch_size: int, wall_s: float) -> None:
        """Account one minibatch that took `wall_s` of wall time."""

    def usage(self) -> DeviceUsage:
        """Totals so far."""

    def restore(self, usage: DeviceUsage) -> None:
        """Continue from totals saved in a checkpoint."""


class WallClockMeter:
    """No device attached: device time is wall time, energy unknown."""

    def __init__(self) -> None:
        self._usage = DeviceUsage()

    def step(self, batch_size: int, wall_s: float) -> None:
        """Add the minibatch's wall time."""
        self._usage.device_time_s += wall_s

    def usage(self) -> DeviceUsage:
        """Totals so far."""
        return self._usage.model_copy()

    def restore(self, usage: DeviceUsage) -> None:
        """Continue from saved totals."""
        self._usage = usage.model_copy()


class CheckpointMismatchError(ValueError):
    """A checkpoint in the folder belongs to a different run."""


def load_checkpoint(
    path: Path, spec: TrainSpec, device: torch.device | str = "cpu"
) -> dict[str, object] | None:
    """A checkpoint of this run with every tensor mapped to `device`, whichever device wrote it."""
    if not path.is_file():
        return None
    data: dict[str, object] = torch.load(path, map_location=device, weights_only=False)
    if data.get("spec_key") != spec.key():
        raise CheckpointMismatchError(
            f"{path} belongs to a different training run (spec {data.get('spec_key')}, this run"
            f" {spec.key()}); use another --checkpoint-dir or delete the file"
        )
    return data


def train(
    spec: TrainSpec,
    checkpoint_dir: Path,
    meter: DeviceMeter | None = None,
    reporter: Reporter | None = None,
    *,
    task: Task | None = None,
) -> TrainResult:
    """Train (or resume) to the target or the budget, checkpointing at every evaluation.

    `task`: the data set, when the caller has it loaded already (`edgetrain run`).
    """
    configure_threads()
    accel: Accelerator = resolve(spec.device, spec.precision)
    meter = meter or WallClockMeter()
    if task is None:
        task = load_task(spec.dataset, spec.dataset_limit)
    task = task.to(accel.device)
    torch.manual_seed(spec.seed)
    model = make_model(spec.model, task)
    if spec.weights is not None:
        load_pretrained(model, spec.weights)
    model.to(accel.device)
    optimizer = make_optimizer(spec.optimizer, model, spec.batch_size)
    scaler = accel.grad_scaler()
    ckpt_path = checkpoint_dir / CHECKPOINT_NAME
    state = TrainState()
    saved = load_checkpoint(ckpt_path, spec, accel.device)
    if saved is not None:
        model.load_state_dict(saved["model"])  # type: ignore[arg-type]
        # Optimizer.load_state_dict casts its state to each parameter's device.
        optimizer.load_state_dict(saved["optimizer"])  # type: ignore[arg-type]
        restore_rng_state(saved["rng"], accel)
        if scaler is not None and saved.get("scaler"):
            scaler.load_state_dict(saved["scaler"])  # type: ignore[arg-type]
        state = TrainState(**saved["state"])  # type: ignore[arg-type]
        meter.restore(DeviceUsage.model_validate(saved["usage"]))
    resumed_from = state.samples
    if reporter:
        reporter.start(
            f"train {spec.model} b={spec.batch_size} on {spec.dataset} ({accel.label})",
            spec.sample_budget,
            resumed_from_samples=resumed_from,
            device=accel.label,
            precision=accel.precision.value,
        )

    last = time.perf_counter()

    def on_step(_state: TrainState, batch_size: int) -> None:
        nonlocal last
        accel.synchronize()  # the step's kernels are done before the clock is read
        now = time.perf_counter()
        meter.step(batch_size, now - last)
        last = now

    def on_eval(s: TrainState) -> None:
        save_state_atomic(
            {
                "spec_key": spec.key(),
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "rng": rng_state(accel),
                "scaler": scaler.state_dict() if scaler is not None else None,
                "device": accel.label,
                "state": {
                    "samples": s.samples,
                    "accuracy": s.accuracy,
                    "reached_target": s.reached_target,
                    "curve": list(s.curve),
                    "noise": list(s.noise),
                },
                "usage": meter.usage().model_dump(),
            },
            ckpt_path,
        )
        if reporter:
            tick = TrainingEvent(
                event="progress",
                samples=s.samples,
                accuracy=s.accuracy,
                usage=meter.usage(),
                device=accel.label,
                precision=accel.precision.value,
            )
            reporter.advance(s.samples, f"acc {s.accuracy:.3f}", **tick.fields())
        nonlocal last
        last = time.perf_counter()  # evaluation time is not training time (it synchronised)

    state = train_to_target(
        model,
        optimizer,
        task,
        batch_size=spec.batch_size,
        target_accuracy=spec.target_accuracy,
        sample_budget=spec.sample_budget,
        eval_interval_samples=spec.eval_interval_samples,
        seed=spec.seed,
        eval_samples=spec.eval_samples,
        state=state,
        on_step=on_step,
        on_eval=on_eval,
        accel=accel,
        scaler=scaler,
        # The observation a recurring job records carries the noise scale on the target data.
        measure_noise=True,
    )
    return TrainResult(
        samples=state.samples,
        accuracy=state.accuracy,
        reached_target=state.reached_target,
        resumed_from_samples=resumed_from,
        usage=meter.usage(),
        curve=state.curve,
        device=accel.label,
        precision=accel.precision.value,
        samples_to_target=state.samples_to_target(spec.target_accuracy),
        gradient_noise_scale=state.gradient_noise_scale(),
    )
