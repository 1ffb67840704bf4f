"""Physical model of a Jetson training a model: time per minibatch and power per component.

GPU power (the issue's form):  P_gpu = P_static + k * util(b) * a(b, f) * f * V(f)^2, where
V is flat up to the board's Vmin knee and rises linearly to V(fmax); `a` is the switching
activity, 1 while computing and `stall_activity` while stalled on DRAM.
Minibatch time (roofline sum): t_gpu = FLOPs(b) / (f * flops_per_cycle * eff(b)) + bytes / BW,
then t_batch = max(t_gpu + step_overhead, data_loading / workers) with CPU work scaled by the
CPU clock. Every number produced here is simulated and labelled so.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from pydantic import BaseModel, ConfigDict

from edgetrain.api.errors import BadInputError
from edgetrain.api.workload import WorkloadCost
from edgetrain.device.sim.boards import BOARDS, BoardSpec


class UnknownBoardError(BadInputError, KeyError):
    """Raised for a board name the twin does not know."""


def get_board(board: str | BoardSpec) -> BoardSpec:
    """Look up a board spec by name (or pass a spec through)."""
    if isinstance(board, BoardSpec):
        return board
    try:
        return BOARDS[board]
    except KeyError:
        raise UnknownBoardError(
            f"unknown board {board!r}; simulated boards: {', '.join(sorted(BOARDS))}"
        ) from None


class PowerMode(BaseModel):
    """Non-GPU part of a full power mode (PowerTrain): online CPU cores, CPU and EMC clocks."""

    model_config = ConfigDict(frozen=True)

    cpu_cores: int
    cpu_freq_hz: int
    emc_freq_hz: int


class FullPowerMode(PowerMode):
    """A complete power mode: CPU cores, CPU clock, GPU clock, EMC clock."""

    gpu_freq_hz: int


def max_power_mode(board: str | BoardSpec) -> PowerMode:
    """The MAXN-like mode: all cores, top CPU and EMC clocks."""
    spec = get_board(board)
    return PowerMode(
        cpu_cores=spec.cpu_cores,
        cpu_freq_hz=max(spec.cpu_freqs_hz),
        emc_freq_hz=max(spec.emc_freqs_hz),
    )


def count_power_modes(board: str | BoardSpec) -> int:
    """Number of full power modes (cores x CPU freqs x GPU freqs x EMC freqs)."""
    spec = get_board(board)
    return spec.cpu_cores * len(spec.cpu_freqs_hz) * len(spec.gpu_freqs_hz) * len(spec.emc_freqs_hz)


def enumerate_power_modes(board: str | BoardSpec) -> Iterator[FullPowerMode]:
    """Every full power mode of the board, in a stable order (cores, CPU, GPU, EMC ascending)."""
    spec = get_board(board)
    for cores in range(1, spec.cpu_cores + 1):
        for cpu in sorted(spec.cpu_freqs_hz):
            for gpu in sorted(spec.gpu_freqs_hz):
                for emc in sorted(spec.emc_freqs_hz):
                    yield FullPowerMode(
                        cpu_cores=cores, cpu_freq_hz=cpu, gpu_freq_hz=gpu, emc_freq_hz=emc
                    )


class PowerComponents(BaseModel):
    """Power split by component (W, simulated); rails are weighted sums of these."""

    model_config = ConfigDict(frozen=True)

    idle_w: float
    cpu_w: float
    gpu_w: float
    mem_w: float
    simulated: Literal[True] = True

    @property
    def total_w(self) -> float:
        """Module power: the sum of the components."""
        return self.idle_w + self.cpu_w + self.gpu_w + self.mem_w

    def scaled(self, factor: float) -> PowerComponents:
        """Every component times `factor` (used for noise and settling)."""
        return PowerComponents(
            idle_w=self.idle_w * factor,
            cpu_w=self.cpu_w * factor,
            gpu_w=self.gpu_w * factor,
            mem_w=self.mem_w * factor,
        )

    def as_dict(self) -> dict[str, float]:
        """Component name (as used in BoardSpec.rail_components) -> watts."""
        return {"idle": self.idle_w, "cpu": self.cpu_w, "gpu": self.gpu_w, "mem": self.mem_w}


class GroundTruth(BaseModel):
    """The model's exact answer for one (board, workload, batch, GPU clock, mode); simulated."""

    model_config = ConfigDict(frozen=True)

    board: str
    model: str
    input_shape: tuple[int, ...]
    batch_size: int
    gpu_freq_hz: int
    mode: PowerMode
    time_per_sample_s: float
    time_per_batch_s: float
    gpu_busy_s: float  # per minibatch: the high-power phase
    peak_power_w: float  # power while the GPU is busy (what a fast sampler's max converges to)
    mean_power_w: float  # time-weighted over a whole minibatch
    busy: PowerComponents
    gap: PowerComponents  # between GPU phases (Python overhead, waiting on data)
    simulated: Literal[True] = True


def gpu_voltage_ratio(spec: BoardSpec, freq_hz: float) -> float:
    """V(f)/Vmin: 1 up to the knee, then linear to `v_ratio_at_fmax` at the top frequency."""
    p = spec.physics
    if freq_hz <= p.v_knee_hz:
        return 1.0
    span = max(spec.gpu_fmax_hz - p.v_knee_hz, 1)
    return 1.0 + (p.v_ratio_at_fmax - 1.0) * (freq_hz - p.v_knee_hz) / span


def cpu_core_power_w(spec: BoardSpec, cpu_freq_hz: float) -> float:
    """Power of one busy core: f * V^2 with V linear in f between the CPU table's ends."""
    p = spec.physics
    fmin, fmax = min(spec.cpu_freqs_hz), max(spec.cpu_freqs_hz)
    x = (cpu_freq_hz - fmin) / max(fmax - fmin, 1)
    v = (1.0 + (p.cpu_v_ratio - 1.0) * x) / p.cpu_v_ratio  # V/Vmax
    return p.cpu_core_busy_w_at_max * (cpu_freq_hz / fmax) * v * v


def idle_power(spec: BoardSpec, mode: PowerMode | None = None) -> PowerComponents:
    """Power with nothing running: board idle, idle online cores, GPU rail-gated."""
    mode = mode or max_power_mode(spec)
    p = spec.physics
    return PowerComponents(
        idle_w=p.idle_w, cpu_w=mode.cpu_cores * p.cpu_core_idle_w, gpu_w=0.0, mem_w=0.0
    )


def _validate(spec: BoardSpec, batch_size: int, gpu_freq_hz: int, mode: PowerMode) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if gpu_freq_hz <= 0:
        raise ValueError(f"gpu_freq_hz must be > 0, got {gpu_freq_hz}")
    if not 1 <= mode.cpu_cores <= spec.cpu_cores:
        raise ValueError(f"{spec.name}: cpu_cores must be in 1..{spec.cpu_cores}")


def ground_truth(
    board: str | BoardSpec,
    cost: WorkloadCost,
    batch_size: int,
    gpu_freq_hz: int,
    mode: PowerMode | None = None,
) -> GroundTruth:
    """Noise-free time per sample and peak/mean power of training a workload of `cost` on
    `board` (simulated).

    Frequencies need not be on the tables (the twin passes the effective, possibly throttled,
    clock); profilers compare their measurements against this.
    """
    spec = get_board(board)
    return _ground_truth(spec, cost, batch_size, gpu_freq_hz, mode or max_power_mode(spec))


def _ground_truth(
    spec: BoardSpec, cost: WorkloadCost, b: int, f: int, mode: PowerMode
) -> GroundTruth:
    _validate(spec, b, f, mode)
    p = spec.physics
    cpu_fmax = max(spec.cpu_freqs_hz)
    emc_fmax = max(spec.emc_freqs_hz)
    cpu_slowdown = cpu_fmax / mode.cpu_freq_hz

    # Roofline sum: compute at the achieved FP32 rate, then DRAM traffic at achievable bandwidth.
    eff = p.eff_max * b / (b + p.eff_half_batch)
    t_compute = b * cost.flops_per_sample / (f * p.gpu_flops_per_cycle * eff)
    bandwidth = p.emc_bus_bytes * 2 * mode.emc_freq_hz * p.bw_efficiency
    traffic = b * cost.activation_bytes_per_sample * p.activation_traffic
    traffic += cost.param_bytes * p.param_traffic
    t_mem = traffic / bandwidth
    t_gpu = t_compute + t_mem

    # Host side: the training loop's Python/launch overhead is serial with the GPU; data loading
    # runs in worker processes (one per spare core) and overlaps, so it only binds when slower.
    t_step = p.step_overhead_s * cpu_slowdown
    workers = max(1, mode.cpu_cores - 1)
    load_core_s = b * p.load_s_per_sample * cpu_slowdown
    t_batch = max(t_gpu + t_step, load_core_s / workers)
    # The main thread is busy for the whole step: launch overhead, then CUDA's spin-wait on sync.
    busy_cores = min(float(mode.cpu_cores), 1.0 + load_core_s / t_batch)

    core_w = cpu_core_power_w(spec, mode.cpu_freq_hz)
    cpu_w = busy_cores * core_w + (mode.cpu_cores - busy_cores) * p.cpu_core_idle_w

    util = p.util_min + (1.0 - p.util_min) * b / (b + p.util_half_batch)
    activity = (t_compute + p.stall_activity * t_mem) / t_gpu
    v = gpu_voltage_ratio(spec, f)
    gpu_busy_w = p.gpu_static_w + p.gpu_k_w_per_hz * util * activity * f * v * v
    bw_util = min(1.0, traffic / (t_gpu * p.emc_bus_bytes * 2 * mode.emc_freq_hz))
    mem_w = p.mem_busy_w_at_max * (mode.emc_freq_hz / emc_fmax) * (0.3 + 0.7 * bw_util)

    busy = PowerComponents(idle_w=p.idle_w, cpu_w=cpu_w, gpu_w=gpu_busy_w, mem_w=mem_w)
    gap = PowerComponents(idle_w=p.idle_w, cpu_w=cpu_w, gpu_w=p.gpu_static_w, mem_w=0.0)
    t_gap = t_batch - t_gpu
    mean_w = (busy.total_w * t_gpu + gap.total_w * t_gap) / t_batch
    return GroundTruth(
        board=spec.name,
        model=cost.model,
        input_shape=cost.input_shape,
        batch_size=b,
        gpu_freq_hz=f,
        mode=PowerMode(
            cpu_cores=mode.cpu_cores, cpu_freq_hz=mode.cpu_freq_hz, emc_freq_hz=mode.emc_freq_hz
        ),
        time_per_sample_s=t_batch / b,
        time_per_batch_s=t_batch,
        gpu_busy_s=t_gpu,
        peak_power_w=busy.total_w,
        mean_power_w=mean_w,
        busy=busy,
        gap=gap,
    )
