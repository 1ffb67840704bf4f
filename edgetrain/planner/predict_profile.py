"""The `predicted` profiling strategy on a device session (real sysfs or a twin's tree).

Profile k points sampled to cover the (batch size, full power mode) grid, transfer the board's
reference MLPs to them, and predict the whole table. This module does device I/O (it sets CPU
cores, CPU and EMC clocks through sysfs) and is imported only by `edgetrain profile`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import numpy as np

from edgetrain.api.errors import BadInputError
from edgetrain.api.io import write_text_atomic
from edgetrain.api.profile import ProfilePoint
from edgetrain.device.sim import BOARDS, read_state
from edgetrain.planner.predict import (
    PredictionReport,
    Target,
    TrainConfig,
    cover_sample,
    fit_predictor,
    profile_points,
)
from edgetrain.planner.predict_refs import load_reference
from edgetrain.planner.predict_twin import board_space

if TYPE_CHECKING:
    from edgetrain.workloads.device_session import DeviceSession
    from edgetrain.workloads.profile import Profiler, ProfileSpec
    from edgetrain.workloads.progress import Reporter

CPU_DIR = "sys/devices/system/cpu"


class PowerModeWriter:
    """Sets online cores, CPU clock cap and EMC clock under a sysfs root; restores on exit.

    The paths are the Jetson ones the twin also watches (jetson-facts.md §1); on a real board
    this needs root, and nvpmodel must not be changing modes at the same time.
    """

    def __init__(self, root: Path, board: str) -> None:
        self.root = root
        self.spec = BOARDS[board]
        emc = root / self.spec.emc_debugfs_dir
        self.emc_rate = emc / ("rate" if "bpmp" in self.spec.emc_debugfs_dir else "clk_rate")
        self._saved: dict[Path, str] = {}

    def _write(self, path: Path, text: str) -> None:
        if path not in self._saved:
            self._saved[path] = path.read_text() if path.exists() else ""
        path.write_text(text)

    def apply(self, cpu_cores: int, cpu_freq_hz: int, emc_freq_hz: int) -> None:
        """Online the first `cpu_cores` cores, cap every core's clock, set the EMC rate."""
        cpu = self.root / CPU_DIR
        # Cap clocks before onlining cores, so a core never comes up above the new cap.
        for i in range(self.spec.cpu_cores):
            self._write(cpu / f"cpu{i}/cpufreq/scaling_max_freq", f"{cpu_freq_hz // 1000}\n")
        for i in range(1, self.spec.cpu_cores):
            self._write(cpu / f"cpu{i}/online", "1\n" if i < cpu_cores else "0\n")
        self._write(self.emc_rate, f"{emc_freq_hz}\n")

    def wait_applied(self, cpu_cores: int, cpu_freq_hz: int, emc_freq_hz: int) -> None:
        """On a twin, wait until its state reports the mode (it re-reads the files each tick)."""
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            state = read_state(self.root)
            if state is None:
                return  # a real board: the writes above took effect synchronously
            if (state.cpu_cores, state.cpu_freq_hz, state.emc_freq_hz) == (
                cpu_cores,
                cpu_freq_hz,
                emc_freq_hz,
            ):
                return
            time.sleep(0.02)
        raise BadInputError(f"the device did not take power mode {cpu_cores} cores etc. in 5 s")

    def restore(self) -> None:
        """Put every written file back as it was (cores online again before clocks)."""
        for path, text in reversed(list(self._saved.items())):
            if text:
                path.write_text(text)
        self._saved.clear()

    def __enter__(self) -> PowerModeWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()


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
    profiler: Profiler,
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
    reference = load_reference(board)
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
    with PowerModeWriter(session.root, board) as modes:
        for n, i in enumerate(order.tolist(), start=1):
            b, gpu, cpu, cores, emc = (int(v) for v in rows[i])
            modes.apply(cores, cpu, emc)
            modes.wait_applied(cores, cpu, emc)
            point = profiler.measure(b, gpu).model_copy(
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


def prediction_report_path(profile_path: str | Path) -> Path:
    """Where the transfer report of a predicted profile lives: `<name>.predictor.json`."""
    path = Path(profile_path)
    return path.with_name(path.stem + ".predictor.json")


def write_prediction_report(profile_path: str | Path, report: PredictionReport) -> None:
    """Write the transfer report beside the profile CSV, atomically."""
    write_text_atomic(prediction_report_path(profile_path), report.model_dump_json(indent=2) + "\n")
