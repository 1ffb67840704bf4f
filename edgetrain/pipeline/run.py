"""`edgetrain run job.yaml`: the whole method without a cluster, reusing cached phases."""

from __future__ import annotations

import contextlib
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from edgetrain.api.efficiency import EfficiencyVector, read_efficiency, write_efficiency
from edgetrain.api.errors import BadInputError
from edgetrain.api.io import file_sha256
from edgetrain.api.job import PowerAwareTrainingJobSpec, efficiency_cache_key, profile_cache_key
from edgetrain.api.job_status import HistoryStatus
from edgetrain.api.plan import PlanResult
from edgetrain.api.profile import (
    ProfileMetadata,
    ProfilePoint,
    read_profile,
    read_profile_metadata,
    write_profile,
    write_profile_metadata,
)
from edgetrain.api.training import TrainResult
from edgetrain.api.workload_spec import estimate_spec, profile_spec, train_spec
from edgetrain.device.power_mode import PowerModeWriter
from edgetrain.device.sim import DeviceTwin, TwinWorkload
from edgetrain.pipeline.dryrun import efficiency_cache_path, profile_cache_path
from edgetrain.pipeline.history import observation_of, plan_input, planning, record
from edgetrain.pipeline.validate import validate_job
from edgetrain.planner import Lut
from edgetrain.planner import plan as make_plan
from edgetrain.workloads import workload_cost
from edgetrain.workloads.accel import resolve
from edgetrain.workloads.device_session import DeviceSession, SessionMeter
from edgetrain.workloads.estimate import estimate
from edgetrain.workloads.profile import profile
from edgetrain.workloads.progress import Reporter
from edgetrain.workloads.train import train
from edgetrain.workloads.training import Task, load_task
from edgetrain.workloads.weights import PretrainSpec, pretrain


class PhaseRecord(BaseModel):
    """How one phase went: cached or run, and how long it took (wall seconds)."""

    cached: bool
    wall_s: float
    path: str


class RunOutcome(BaseModel):
    """Everything `edgetrain run` learned; report.json is this model."""

    spec: PowerAwareTrainingJobSpec
    device_model: str
    simulated: bool
    efficiency: EfficiencyVector
    efficiency_phase: PhaseRecord
    profile: list[ProfilePoint]
    profile_metadata: ProfileMetadata
    profile_phase: PhaseRecord
    plan: PlanResult
    training: TrainResult
    device: str | None = None  # where training ran (cpu, cuda:N); also in training.device
    precision: str | None = None
    training_wall_s: float
    # (device seconds since training start, mean board W over the minibatches ending then):
    # on the device's clock, so a twin's trace reads like a real board's.
    power_trace: list[tuple[float, float]]
    history: HistoryStatus | None = None  # prior, observations, posterior (learnFromHistory)
    observation: str | None = None  # where this run's own observation was recorded


def resolve_weights(spec: PowerAwareTrainingJobSpec, reporter: Reporter | None) -> Path | None:
    """A weights file from the spec, made by pretraining when the spec says so."""
    if spec.model.weights:
        path = Path(spec.model.weights)
        if not path.is_file():
            raise BadInputError(f"spec.model.weights: {path} does not exist")
        return path
    if spec.model.pretrain:
        recipe = PretrainSpec(
            model=spec.model.architecture,
            dataset=spec.model.pretrain.dataset,
            samples=spec.model.pretrain.samples,
        )
        return pretrain(
            recipe, reporter, device=spec.compute.device, precision=spec.compute.precision
        )
    return None


@contextlib.contextmanager
def open_device(device: str, workdir: Path) -> Iterator[DeviceSession]:
    """A session on a twin ('sim:<board>', started here) or this machine's /sys ('local')."""
    if device == "local":
        with DeviceSession("/") as session:
            yield session
        return
    if not device.startswith("sim:"):
        raise BadInputError(
            f"spec.placement.device must be 'sim:<board>' or 'local', got {device!r}"
        )
    root = workdir / "twin"
    twin = DeviceTwin(device.removeprefix("sim:"), root, cost_of=workload_cost)
    with twin, DeviceSession(root) as session:
        yield session


def _estimate_phase(
    spec: PowerAwareTrainingJobSpec, weights: Path | None, reporter: Reporter | None
) -> tuple[EfficiencyVector, PhaseRecord]:
    started = time.monotonic()
    key = efficiency_cache_key(spec, file_sha256(weights) if weights else None)
    path = efficiency_cache_path(spec, key)
    if path.is_file():
        return read_efficiency(path), PhaseRecord(cached=True, wall_s=0.0, path=str(path))
    vector = estimate(
        estimate_spec(spec, weights),
        reporter,
    )
    write_efficiency(path, vector)
    return vector, PhaseRecord(cached=False, wall_s=time.monotonic() - started, path=str(path))


def _profile_phase(
    spec: PowerAwareTrainingJobSpec, session: DeviceSession, task: Task, reporter: Reporter | None,
    window_s: float,
) -> tuple[list[ProfilePoint], ProfileMetadata, PhaseRecord]:
    started = time.monotonic()
    shape = tuple(int(d) for d in task.x_train.shape[1:])
    key = profile_cache_key(spec, session.board_name, session.identity.l4t, shape)
    path = profile_cache_path(spec, session.board_name, key)
    meta = read_profile_metadata(path) if path.is_file() else None
    if meta is not None:
        return read_profile(path), meta, PhaseRecord(cached=True, wall_s=0.0, path=str(path))
    run = profile(
        profile_spec(spec, min_window_s=window_s, stabilize_window_s=window_s),
        session,
        reporter,
        task=task,
    )
    write_profile(path, run.points)
    write_profile_metadata(path, run.metadata)
    record = PhaseRecord(cached=False, wall_s=time.monotonic() - started, path=str(path))
    return run.points, run.metadata, record


def _run_id() -> str:
    """A name of its own for each run's observation (reused workdirs must not overwrite)."""
    return f"run-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"


def run_job(
    spec: PowerAwareTrainingJobSpec, workdir: Path | None = None, reporter: Reporter | None = None,
    *, profile_window_s: float = 1.0,
) -> RunOutcome:
    """Estimate (or reuse) r, profile (or reuse) the LUT, plan, then train at the plan
    (`profile_window_s`: each profile point's power windows)."""
    validate_job(spec)
    resolve(spec.compute.device, spec.compute.precision)  # fail before anything is written
    workdir = workdir or Path(tempfile.mkdtemp(prefix="edgetrain-run-"))
    workdir.mkdir(parents=True, exist_ok=True)
    weights = resolve_weights(spec, reporter)
    efficiency, eff_phase = _estimate_phase(spec, weights, reporter)
    if reporter:
        reporter.event("efficiency", cached=eff_phase.cached, **efficiency.model_dump())
    weights_sha = file_sha256(weights) if weights else None
    learned = plan_input(spec, efficiency, weights_sha, reporter)
    # The target set, loaded once: profiling and training both run on it.
    task = load_task(spec.dataset.name, spec.dataset.limit)
    with open_device(spec.placement.device, workdir) as session:
        points, meta, prof_phase = _profile_phase(spec, session, task, reporter,
                                                  profile_window_s)
        lut = Lut.from_points(points)
        # The posterior mean, gated on this profile (the exploration gate weighs its costs).
        planned, history = planning(spec, efficiency, learned, lut, reporter)
        result = make_plan(
            lut,
            planned,
            spec.power_limit_w,
            metric=spec.strategy.power_metric,
            objective=spec.strategy.objective,
        )
        if reporter:
            reporter.event("plan", **result.model_dump())
        workload = TwinWorkload(
            model=spec.model.architecture,
            input_shape=tuple(int(d) for d in task.x_train.shape[1:]),
            num_classes=task.num_classes,
            batch_size=result.batch_size,
            busy=True,
        )
        with contextlib.ExitStack() as stack:
            if result.cpu_cores and result.cpu_freq_hz and result.emc_freq_hz:
                # A full power mode (predicted profiles): set it as profiled, restore after.
                modes = stack.enter_context(PowerModeWriter(session.root, session.board_name))
                modes.apply(result.cpu_cores, result.cpu_freq_hz, result.emc_freq_hz)
                modes.wait_applied(result.cpu_cores, result.cpu_freq_hz, result.emc_freq_hz)
            session.pin(result.gpu_freq_hz)
            session.set_workload(workload)
            meter = SessionMeter(session, workload)
            started = time.monotonic()
            training = train(
                train_spec(spec, result.batch_size, weights),
                workdir / "checkpoints",
                meter=meter,
                reporter=reporter,
                task=task,
            )
            ended = time.monotonic()
    # Every finished training teaches the next job with the same model, target set and target.
    observed = record(
        observation_of(spec, result.batch_size, training, weights_sha, _run_id(), history)
    )
    return RunOutcome(
        spec=spec,
        device_model=session.board_name,
        simulated=session.simulated,
        efficiency=efficiency,
        efficiency_phase=eff_phase,
        profile=points,
        profile_metadata=meta,
        profile_phase=prof_phase,
        plan=result,
        training=training,
        device=training.device,
        precision=training.precision,
        training_wall_s=ended - started,
        power_trace=meter.power_trace(),
        history=history,
        observation=str(observed),
    )
