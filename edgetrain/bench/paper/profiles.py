"""The two other profiles edgetrain can plan from: the full grid, and a predicted one (PowerTrain).

Both are simulated on the twin's (batch size × GPU clock) grid at the MAXN CPU/memory clocks, the
grid the frontier profile and the oracle use, so the three plans are judged on the same truth.
"""

from __future__ import annotations

import functools

import numpy as np
from pydantic import BaseModel

from edgetrain.api.profile import ProfilePoint
from edgetrain.bench.paper.arithmetic import noisy_measure, profiling_device_time_s
from edgetrain.bench.paper.config import PredictedProfiling, ProfilingCost
from edgetrain.planner import Lut
from edgetrain.predictor.mlp import TrainConfig, fit_predictor, mape
from edgetrain.predictor.reference import Reference, load_reference
from edgetrain.predictor.space import ModeSpace, Target, cover_sample, profile_points


class SimulatedProfile(BaseModel):
    """The points a plan reads, how many were measured, and their device time (simulated)."""

    points: list[ProfilePoint]
    measured: int
    device_s: float


class PredictionFit(BaseModel):
    """How well one predicted profile matches the twin's truth (raw MLP, no power margin)."""

    workload: str
    board: str
    seed: int
    measured_points: int
    grid_points: int
    time_mape_pct: float
    peak_power_mape_pct: float
    mean_power_mape_pct: float
    power_margin: float = 0.0  # relative margin added to predicted peak power
    device_s: float


def full_profile(truth: Lut, rng: np.random.Generator, cost: ProfilingCost) -> SimulatedProfile:
    """Every (b, f) of the grid measured once, with the frontier profile's noise."""
    measured, measure = noisy_measure(truth, rng, cost)
    for b in truth.batch_sizes.tolist():
        for f in truth.gpu_freqs_hz.tolist():
            measure(int(b), int(f))
    return SimulatedProfile(
        points=measured, measured=len(measured), device_s=profiling_device_time_s(measured, cost)
    )


def gpu_space(board: str, truth: Lut) -> ModeSpace:
    """The truth grid as the predictor's mode space: GPU clocks at the MAXN CPU/memory clocks."""
    from edgetrain.device.sim import max_power_mode

    top = max_power_mode(board)
    return ModeSpace(
        batch_sizes=tuple(int(b) for b in truth.batch_sizes),
        gpu_freqs_hz=tuple(int(f) for f in truth.gpu_freqs_hz),
        cpu_freqs_hz=(top.cpu_freq_hz,),
        cpu_cores=(top.cpu_cores,),
        emc_freqs_hz=(top.emc_freq_hz,),
    )


@functools.lru_cache(maxsize=8)
def _reference(board: str) -> Reference:
    from edgetrain.workloads import workload_cost

    return load_reference(board, cost_of=workload_cost)


def predicted_profile(
    truth: Lut,
    board: str,
    rng: np.random.Generator,
    cost: ProfilingCost,
    spec: PredictedProfiling,
    seed: int,
) -> tuple[SimulatedProfile, PredictionFit]:
    """k covering points measured with noise, the board's reference transferred to them, and the
    rest of the grid predicted (power with the learned margin), as `profiling: predicted` does.
    """
    space = gpu_space(board, truth)
    grid = space.grid()
    k = min(spec.points, space.size)
    flat = cover_sample(space, k, seed)
    measured_list, measure = noisy_measure(truth, rng, cost)
    measured = {int(i): measure(int(grid[i, 0]), int(grid[i, 1])) for i in flat.tolist()}
    cells = np.asarray(sorted(measured), dtype=np.int64)
    targets = {t: np.asarray([getattr(measured[int(c)], t.value) for c in cells]) for t in Target}
    reference = _reference(board)
    predictor, report = fit_predictor(
        grid[cells],
        targets,
        TrainConfig(seed=seed, epochs=spec.epochs),
        reference=reference.models,
        reference_name=reference.name,
        margin_quantile=spec.margin_quantile,
    )
    raw = predictor.predict(grid, with_margin=False)
    # space.grid() is batch-size major, then GPU clock: the truth matrices' row-major order.
    truth_of = {
        Target.time: truth.time_per_sample_s.ravel(),
        Target.peak_power: truth.peak_power_w.ravel(),
        Target.mean_power: truth.mean_power_w.ravel(),
    }
    # The grid has one CPU/memory mode; dropping it keeps the points on the frontier's LUT axes.
    points = [
        p.model_copy(update={"cpu_freq_hz": None, "cpu_cores": None, "emc_freq_hz": None})
        for p in profile_points(grid, predictor.predict(grid), measured)
    ]
    device_s = profiling_device_time_s(measured_list, cost)
    fit = PredictionFit(
        workload="",
        board=board,
        seed=seed,
        measured_points=len(measured),
        grid_points=space.size,
        time_mape_pct=mape(raw[Target.time], truth_of[Target.time]),
        peak_power_mape_pct=mape(raw[Target.peak_power], truth_of[Target.peak_power]),
        mean_power_mape_pct=mape(raw[Target.mean_power], truth_of[Target.mean_power]),
        power_margin=report.power_margin.get(Target.peak_power.value, 0.0),
        device_s=device_s,
    )
    return SimulatedProfile(points=points, measured=len(measured), device_s=device_s), fit
