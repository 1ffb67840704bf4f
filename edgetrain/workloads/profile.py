"""On-device profiling (first paper §4.1): time and power per (batch size, GPU frequency)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterator

import torch
from pydantic import BaseModel

from edgetrain.api.profile import ProfileMetadata, ProfilePoint
from edgetrain.api.training import OptimizerSpec
from edgetrain.api.workload_spec import ProfileSpec, ProfilingStrategy
from edgetrain.device.sim import TwinWorkload
from edgetrain.planner import baseline_column, frontier_order
from edgetrain.predictor.mlp import PredictionReport
from edgetrain.workloads.accel import resolve
from edgetrain.workloads.device_session import DeviceSession
from edgetrain.workloads.models import is_text_model
from edgetrain.workloads.progress import Reporter
from edgetrain.workloads.training import (
    Task,
    configure_threads,
    load_task,
    make_model,
    make_optimizer,
    train_step,
)


class ProfileRun(BaseModel):
    """Measured points and how the run went."""

    points: list[ProfilePoint]
    metadata: ProfileMetadata
    prediction: PredictionReport | None = None  # the predicted strategy's transfer report


def _input_shape(task: Task) -> tuple[int, ...]:
    return tuple(int(d) for d in task.x_train.shape[1:])


class Profiler:
    """Measures points on one device with one model; restores the GPU range when closed."""

    def __init__(self, spec: ProfileSpec, session: DeviceSession, task: Task) -> None:
        self.spec = spec
        self.session = session
        self.accel = resolve(spec.device, spec.precision)
        self.task = task.to(self.accel.device)
        self.model = make_model(spec.model, task).to(self.accel.device)
        self.model.train()
        self._scaler = self.accel.grad_scaler()
        self._optimizers: dict[int, torch.optim.Optimizer] = {}
        self._stream_position = 0

    def _minibatch(self, batch_size: int) -> float:
        """One real training step; returns its wall time (CUDA-synchronised)."""
        optimizer = self._optimizers.setdefault(
            batch_size, make_optimizer(OptimizerSpec(), self.model, batch_size)
        )
        x, y = self.task.batch(self._stream_position, batch_size, 0, self.accel.device)
        self._stream_position += batch_size
        self.accel.synchronize()  # the batch copy is not the step's time
        start = time.perf_counter()
        train_step(self.model, optimizer, x, y, self.accel, self._scaler)
        self.accel.synchronize()
        return time.perf_counter() - start

    def measure(self, batch_size: int, gpu_freq_hz: int) -> ProfilePoint:
        """Pin f, train until power settles, then time m minibatches and read power."""
        spec, session = self.spec, self.session
        workload = TwinWorkload(
            model=spec.model,
            input_shape=_input_shape(self.task),
            num_classes=self.task.num_classes,
            batch_size=batch_size,
            busy=True,
        )
        session.pin(gpu_freq_hz)
        changed_at = time.monotonic()
        session.set_workload(workload)
        self._minibatch(batch_size)  # warm-up: allocations, caches (dropped)
        deadline = changed_at + spec.stabilize_timeout_s
        while time.monotonic() < deadline:
            if session.sampler.wait_stable(
                changed_at, spec.stabilize_window_s, spec.stabilize_spread, timeout_s=0.0
            ):
                break
            self._minibatch(batch_size)
        walls: list[float] = []
        window_start = time.monotonic()
        while len(walls) < spec.minibatches - 1 or (
            time.monotonic() - window_start < spec.min_window_s
        ):
            walls.append(self._minibatch(batch_size))
        stats = session.sampler.stats(window_start, time.monotonic())
        batch_time_s = session.minibatch_time_s(workload, gpu_freq_hz, statistics.mean(walls))
        return ProfilePoint(
            batch_size=batch_size,
            gpu_freq_hz=gpu_freq_hz,
            time_per_sample_s=batch_time_s / batch_size,
            peak_power_w=stats.peak_power_w,
            mean_power_w=min(stats.mean_power_w, stats.peak_power_w),
        )


def grid(spec: ProfileSpec, session: DeviceSession) -> tuple[list[int], list[int]]:
    """Sorted batch sizes and GPU frequencies to profile (validated against the table)."""
    table = session.devfreq.available_frequencies_hz()
    freqs = sorted(spec.gpu_freqs_hz or table)
    for f in freqs:
        session.devfreq.validate(f)
    return sorted(set(spec.batch_sizes)), freqs


def profile_points(spec: ProfileSpec, session: DeviceSession, task: Task) -> Iterator[ProfilePoint]:
    """Yield measured points in the strategy's order."""
    profiler = Profiler(spec, session, task)
    batches, freqs = grid(spec, session)
    if spec.strategy is ProfilingStrategy.frontier:
        measured: list[ProfilePoint] = []
        for point in frontier_order(
            batches, freqs, profiler.measure, spec.power_limit_w, spec.power_metric
        ):
            measured.append(point)
            yield point
        # The baselines' column: every batch size at the largest one's highest feasible clock.
        _, missing = baseline_column(measured, batches, spec.power_limit_w, spec.power_metric)
        for b, f in missing:
            yield profiler.measure(b, f)
        return
    for b in batches:
        for f in freqs:
            yield profiler.measure(b, f)


def profile(
    spec: ProfileSpec,
    session: DeviceSession,
    reporter: Reporter | None = None,
    *,
    task: Task | None = None,
) -> ProfileRun:
    """Run a whole profile on an open session (the caller restores the device on exit).

    `task`: the data set, when the caller has it loaded already (`edgetrain run`).
    """
    configure_threads()
    started = time.monotonic()
    if task is None:
        task = load_task(spec.dataset, spec.dataset_limit)
    if is_text_model(spec.model) != (task.kind == "text"):
        raise ValueError(f"model {spec.model} cannot train on {task.kind} set {spec.dataset}")
    batches, freqs = grid(spec, session)
    grid_points = len(batches) * len(freqs)
    if spec.strategy is ProfilingStrategy.predicted:
        # Lazy: the predictor pulls in its reference models only for this strategy.
        from edgetrain.workloads.profile_predicted import predicted_profile

        profiler = Profiler(spec, session, task)
        predicted = predicted_profile(spec, session, profiler.measure, batches, freqs, reporter)
        meta = _metadata(spec, session, task, (batches, freqs), predicted.measured, started)
        meta.grid_points = predicted.grid_points  # the full (b, mode) grid, not b × GPU clocks
        return ProfileRun(points=predicted.points, metadata=meta, prediction=predicted.report)
    if reporter:
        reporter.start(
            f"profile {spec.model} on {session.board_name} ({spec.strategy.value})",
            grid_points,
            simulated=session.simulated,
        )
    points: list[ProfilePoint] = []
    for point in profile_points(spec, session, task):
        points.append(point)
        if reporter:
            reporter.advance(
                len(points),
                f"b={point.batch_size} {point.gpu_freq_hz / 1e6:g} MHz {point.peak_power_w:.2f} W",
                **point.model_dump(exclude_none=True),
                simulated=session.simulated,
            )
    meta = _metadata(spec, session, task, (batches, freqs), len(points), started)
    return ProfileRun(points=points, metadata=meta)


def _metadata(
    spec: ProfileSpec,
    session: DeviceSession,
    task: Task,
    axes: tuple[list[int], list[int]],
    measured: int,
    started: float,
) -> ProfileMetadata:
    batches, freqs = axes
    return ProfileMetadata(
        device_model=session.board_name,
        l4t=session.identity.l4t,
        model=spec.model,
        input_shape=_input_shape(task),
        dataset=spec.dataset,
        batch_sizes=batches,
        gpu_freqs_hz=freqs,
        strategy=spec.strategy.value,
        power_limit_w=None if math.isinf(spec.power_limit_w) else spec.power_limit_w,
        power_metric=spec.power_metric.value,
        minibatches=spec.minibatches,
        sample_interval_s=session.sampler.interval_s,
        measured_points=measured,
        grid_points=len(batches) * len(freqs),
        duration_s=time.monotonic() - started,
        simulated=session.simulated,
        device=resolve(spec.device, spec.precision).label,
        precision=spec.precision.value,
    )
