"""The device twin as a data source for the predictor: full-mode tables, noise, stock modes.

Profiling thousands of modes live on the twin is too slow, so reference training and the
benchmark read the twin's noise-free `ground_truth` and add seeded measurement noise here,
explicitly. Every figure derived from these tables is simulated.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from edgetrain.api.workload import COST_MODEL_VERSION, WorkloadCost
from edgetrain.device.sim import BOARDS, PowerMode, get_board, ground_truth, max_power_mode
from edgetrain.predictor.space import FloatArray, IntArray, ModeSpace, Target

#: Bump when the predictor's file format or feature definition changes.
PREDICTOR_FORMAT_VERSION = 1

#: Relative σ of the Gaussian measurement noise added to simulated measurements: the live
#: twin's per-sample power noise (DeviceTwin noise_rel=0.01), applied to time as well.
DEFAULT_NOISE_REL = 0.01


class Workload(BaseModel):
    """A model at an input shape: what a reference was trained for (its cost is counted by the
    caller, `edgetrain.workloads.workload_cost`, so the predictor never loads the models)."""

    model_config = ConfigDict(frozen=True)

    model: str
    input_shape: tuple[int, ...] = (3, 32, 32)
    num_classes: int = 10

    @classmethod
    def of(cls, cost: WorkloadCost) -> Workload:
        """The workload a cost was counted for."""
        return cls(model=cost.model, input_shape=cost.input_shape, num_classes=cost.num_classes)


def board_space(
    board: str, batch_sizes: Sequence[int], gpu_freqs_hz: Sequence[int] | None = None
) -> ModeSpace:
    """Every full power mode of a board (optionally fewer GPU clocks) × the batch sizes."""
    spec = get_board(board)
    return ModeSpace(
        batch_sizes=tuple(batch_sizes),
        gpu_freqs_hz=tuple(gpu_freqs_hz or spec.gpu_freqs_hz),
        cpu_freqs_hz=spec.cpu_freqs_hz,
        cpu_cores=tuple(range(1, spec.cpu_cores + 1)),
        emc_freqs_hz=spec.emc_freqs_hz,
    )


def twin_table(board: str, cost: WorkloadCost, grid: IntArray) -> dict[Target, FloatArray]:
    """Noise-free simulated time per sample, peak and mean power for every grid row."""
    spec = get_board(board)
    out = {t: np.empty(len(grid)) for t in Target}
    modes: dict[tuple[int, int, int], PowerMode] = {}
    for i, (b, gpu, cpu, cores, emc) in enumerate(grid.tolist()):
        mode = modes.get((cpu, cores, emc))
        if mode is None:
            mode = modes[(cpu, cores, emc)] = PowerMode(
                cpu_cores=cores, cpu_freq_hz=cpu, emc_freq_hz=emc
            )
        gt = ground_truth(spec, cost, b, gpu, mode)
        out[Target.time][i] = gt.time_per_sample_s
        out[Target.peak_power][i] = gt.peak_power_w
        out[Target.mean_power][i] = gt.mean_power_w
    return out


def with_noise(
    table: dict[Target, FloatArray], noise_rel: float, seed: int
) -> dict[Target, FloatArray]:
    """Measurements: each value × (1 + N(0, noise_rel)), seeded; mean power kept ≤ peak."""
    rng = np.random.default_rng(seed)
    out = {t: v * (1.0 + rng.normal(0.0, noise_rel, size=v.shape)) for t, v in table.items()}
    out[Target.mean_power] = np.minimum(out[Target.mean_power], out[Target.peak_power])
    return out


def twin_fingerprint(board: str, cost: WorkloadCost) -> str:
    """Version of the twin's model for one board and workload: a hash of its constants and of
    its outputs on probe points, so a change to coefficients, formulas or FLOP counting shows.
    """
    spec = get_board(board)
    top = max_power_mode(spec)
    probes: list[list[float]] = []
    for b in (1, 16, 256):
        for gpu in (spec.gpu_fmin_hz, spec.gpu_fmax_hz):
            for mode in (
                top,
                PowerMode(
                    cpu_cores=1,
                    cpu_freq_hz=min(spec.cpu_freqs_hz),
                    emc_freq_hz=min(spec.emc_freqs_hz),
                ),
            ):
                gt = ground_truth(spec, cost, b, gpu, mode)
                probes.append(
                    [
                        float(f"{v:.6g}")
                        for v in (gt.time_per_sample_s, gt.peak_power_w, gt.mean_power_w)
                    ]
                )
    payload = {
        "format": PREDICTOR_FORMAT_VERSION,
        "cost_model": COST_MODEL_VERSION,
        "workload": Workload.of(cost).model_dump(mode="json"),
        "physics": spec.physics.model_dump(mode="json"),
        "tables": [spec.gpu_freqs_hz, spec.cpu_freqs_hz, spec.emc_freqs_hz, spec.cpu_cores],
        "probes": probes,
    }
    blob = json.dumps(payload, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


# ---------------------------------------------------------------- stock modes


class StockMode(BaseModel):
    """An nvpmodel preset snapped to the twin's tables (caps become the highest entry ≤ cap)."""

    model_config = ConfigDict(frozen=True)

    name: str
    cpu_cores: int
    cpu_freq_hz: int
    gpu_freq_hz: int
    emc_freq_hz: int


# (name, cores, CPU cap kHz, GPU cap Hz, EMC cap Hz); None = uncapped. From
# docs/jetson-facts.md §1 (nvpmodel confs); TPC power gating is not modelled.
_NVPMODEL: dict[str, list[tuple[str, int | None, int | None, int | None, int | None]]] = {
    "jetson-nano": [("MAXN", 4, None, None, None), ("5W", 2, 918000, 640000000, None)],
    "jetson-tx2-nx": [
        ("MAXN", 6, None, None, None),
        ("MAXQ", 4, 1200000, 850000000, None),
        ("MAXP_CORE_ALL", 6, 1400000, 1120000000, None),
    ],
    "jetson-xavier-nx": [
        ("MODE_15W_6CORE", 6, 1420800, 1109250000, None),
        ("MODE_15W_2CORE", 2, 1907200, 1109250000, 1600000000),
        ("MODE_10W_4CORE", 4, 1190400, 803250000, None),
        ("MODE_10W_2CORE", 2, 1497600, 803250000, None),
    ],
    "jetson-agx-xavier": [
        ("MAXN", 8, None, None, None),
        ("MODE_30W_ALL", 8, 1200000, 900000000, 1600000000),
        ("MODE_15W", 4, 1200000, 670000000, 1331200000),
        ("MODE_10W", 2, 1200000, 520000000, 1065600000),
    ],
    "jetson-orin-nano": [
        ("MAXN_SUPER", 6, None, None, None),
        ("25W", 6, 1344000, 918000000, 3199000000),
        ("15W", 6, 1497600, 612000000, 2133000000),
    ],
    "jetson-agx-orin": [
        ("MAXN", 12, None, None, None),
        ("MODE_50W", 12, 1497600, 816000000, None),
        ("MODE_30W", 8, 1728000, 612000000, None),
        ("MODE_15W", 4, 1113600, 408000000, 2133000000),
    ],
}


def _cap(table: Sequence[int], cap: int | None) -> int:
    under = [v for v in table if cap is None or v <= cap]
    return max(under) if under else min(table)


def stock_modes(board: str) -> list[StockMode]:
    """The board's MAXN and nvpmodel budget modes on the twin's tables (MAXN first)."""
    spec = get_board(board)
    out = []
    for name, cores, cpu_khz, gpu, emc in _NVPMODEL[spec.name]:
        out.append(
            StockMode(
                name=name,
                cpu_cores=min(cores or spec.cpu_cores, spec.cpu_cores),
                cpu_freq_hz=_cap(spec.cpu_freqs_hz, None if cpu_khz is None else cpu_khz * 1000),
                gpu_freq_hz=_cap(spec.gpu_freqs_hz, gpu),
                emc_freq_hz=_cap(spec.emc_freqs_hz, emc),
            )
        )
    return out


def maxn_mode(board: str) -> StockMode:
    """Every clock at its top and every core online."""
    spec = get_board(board)
    return StockMode(
        name="MAXN",
        cpu_cores=spec.cpu_cores,
        cpu_freq_hz=max(spec.cpu_freqs_hz),
        gpu_freq_hz=spec.gpu_fmax_hz,
        emc_freq_hz=max(spec.emc_freqs_hz),
    )


def simulated_boards() -> list[str]:
    """Board names the twin simulates."""
    return sorted(BOARDS)
