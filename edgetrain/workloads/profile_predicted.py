"""The `predicted` profiling strategy on a device session (real sysfs or a twin's tree).

Profile k points sampled to cover the (batch size, full power mode) grid, transfer the board's
reference MLPs to them, and predict the whole table. Power modes are set through
`edgetrain.device.power_mode`, or asked of the node agent by a pod that may not write them;
this module is imported only by `edgetrain profile`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from edgetrain.api.errors import BadInputError
from edgetrain.api.io import write_text_atomic
from edgetrain.api.profile import ProfilePoint
from edgetrain.api.workload import WorkloadCost
from edgetrain.device import DeviceError
from edgetrain.device.power_mode import PowerModeWriter
from edgetrain.device.sim import BOARDS
from edgetrain.predictor.mlp import PredictionReport, TrainConfig, fit_predictor
from edgetrain.predictor.reference import load_reference
from edgetrain.predictor.space import Target, cover_sample, profile_points
from edgetrain.predictor.twin_data import board_space
from edgetrain.workloads import workload_cost

if TYPE_CHECKING:
    from edgetrain.api.workload_spec import ProfileSpec
    from edgetrain.workloads.device_session import DeviceSession
    from edgetrain.workloads.progress import Reporter


@dataclass(frozen=True)
class PredictedProfile:
    """The predicted table, how many points were measured, and the transfer report."""

    points: list[ProfilePoint]
    measured: int
    grid_points: int
    report: PredictionReport


def predicted_profile(
    spec: ProfileSpec,
    session: DeviceSession,
    measure: Callable[[int, int], ProfilePoint],
    batch_sizes: list[int],
    gpu_freqs_hz: list[int],
    reporter: Reporter | None = None,
    train: TrainConfig | None = None,
) -> PredictedProfile:
    """Measure k covering points, transfer the board's reference, predict every (b, mode).

    Power predictions carry the margin learned from the transfer residuals (PredictionReport);
    measured cells keep their measured values.
    """
    board = session.board_name
    if board not in BOARDS:
        raise BadInputError(
            f"no full-mode tables or reference for board {board!r}; the predicted strategy"
            f" knows {', '.join(sorted(BOARDS))}"
        )
    reference = load_reference(board, cost_of=workload_cost)
    space = board_space(board, batch_sizes, gpu_freqs_hz)
    k = min(spec.predict_points, space.size)
    flat = cover_sample(space, k, spec.predict_seed)
    rows = space.grid(flat)
    # Change modes as little as possible: by mode (clocks falling, as Jetsons prefer), then b.
    order = np.lexsort((rows[:, 0], -rows[:, 4], -rows[:, 3], -rows[:, 2], -rows[:, 1]))
    if reporter:
        reporter.start(
            f"profile {spec.model} on {board} (predicted: {k} of {space.size} points)",
            k,
            simulated=session.simulated,
        )
    measured: dict[int, ProfilePoint] = {}
    with power_modes(session, board) as set_mode:
        for n, i in enumerate(order.tolist(), start=1):
            b, gpu, cpu, cores, emc = (int(v) for v in rows[i])
            set_mode(cores, cpu, emc)
            point = measure(b, gpu).model_copy(
                update={"cpu_freq_hz": cpu, "cpu_cores": cores, "emc_freq_hz": emc}
            )
            measured[int(flat[i])] = point
            if reporter:
                reporter.advance(
                    n,
                    f"b={b} {gpu / 1e6:g} MHz {cores}×{cpu / 1e6:g} MHz EMC {emc / 1e6:g} MHz"
                    f" {point.peak_power_w:.2f} W",
                    **point.model_dump(exclude_none=True),
                    simulated=session.simulated,
                )
    cells = np.asarray(sorted(measured), dtype=np.int64)
    targets = {t: np.asarray([getattr(measured[int(c)], t.value) for c in cells]) for t in Target}
    config = (train or TrainConfig()).model_copy(
        update={"seed": spec.predict_seed, "epochs": spec.predict_epochs}
    )
    predictor, report = fit_predictor(
        space.grid(cells),
        targets,
        config,
        reference=reference.models,
        reference_name=reference.name,
        margin_quantile=spec.margin_quantile,
    )
    grid = space.grid()
    points = profile_points(grid, predictor.predict(grid), measured)
    return PredictedProfile(points, len(measured), space.size, report)


@contextlib.contextmanager
def power_modes(session: DeviceSession, board: str) -> Iterator[Callable[[int, int, int], None]]:
    """Sets a power mode and waits until the device reads it: written here, and the board's mode
    put back at the end; or, where the pod asks the node agent (its /sys read-only), asked of
    the agent, which restores the board's mode when the pod lets go."""
    if session.mode_request is None:
        with PowerModeWriter(session.root, board) as modes:
            def write(cores: int, cpu: int, emc: int) -> None:
                modes.apply(cores, cpu, emc)
                modes.wait_applied(cores, cpu, emc)

            yield write
        return
    ask, reader = session.mode_request, PowerModeWriter(session.root, board)

    def by_agent(cores: int, cpu: int, emc: int) -> None:
        ask((cores, cpu, emc))
        deadline = time.monotonic() + session.clock_timeout_s
        while reader.read() != (cores, cpu, emc):
            if time.monotonic() >= deadline:
                raise DeviceError(
                    f"asked the node agent for power mode {cores} cores, CPU {cpu} Hz, EMC"
                    f" {emc} Hz, but the device reads {reader.read()} after"
                    f" {session.clock_timeout_s:g} s: does the chart's agent have"
                    f" agent.boards.{board}.powerModes=true (see the pod's PowerModeFailed"
                    " Event)?")
            time.sleep(0.05)
        reader.wait_applied(cores, cpu, emc)  # a twin's model takes it on its next tick

    try:
        yield by_agent
    finally:
        ask(None)


def reference_workload_cost(model: str) -> WorkloadCost:
    """A model's cost at its default input: CIFAR-sized images, or the text models' window."""
    from edgetrain.workloads.models import is_text_model

    if is_text_model(model):
        from edgetrain.workloads.datasets import VOCABULARY
        from edgetrain.workloads.training import TEXT_SEQ_LEN

        return workload_cost(model, (TEXT_SEQ_LEN,), len(VOCABULARY))
    return workload_cost(model)


def prediction_report_path(profile_path: str | Path) -> Path:
    """Where the transfer report of a predicted profile lives: `<name>.predictor.json`."""
    path = Path(profile_path)
    return path.with_name(path.stem + ".predictor.json")


def write_prediction_report(profile_path: str | Path, report: PredictionReport) -> None:
    """Write the transfer report beside the profile CSV, atomically."""
    write_text_atomic(prediction_report_path(profile_path), report.model_dump_json(indent=2) + "\n")
