"""The device a workload runs on: frequency control and power sampling, real board or twin."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from edgetrain.api.training import DeviceUsage
from edgetrain.device import (
    DeviceError,
    FrequencyRange,
    GpuDevfreq,
    PowerSampler,
    detect_board,
    resolve_root,
    select_power_sensor,
)
from edgetrain.device.power_mode import PowerModeWriter
from edgetrain.device.sim import (
    BOARDS,
    GroundTruth,
    PowerMode,
    TwinWorkload,
    ground_truth,
    read_state,
    write_workload,
)
from edgetrain.workloads import workload_cost

DEFAULT_SAMPLE_INTERVAL_S = 0.05
# How long a clock asked of the node agent may take to read back: its pod watch, its write
# and the governor, on a loaded node.
AGENT_CLOCK_TIMEOUT_S = 30.0
# The agent writes a pod's GPU range and power mode in one pass: once the pin reads back, the
# mode is there within this, or was refused.
MODE_GRACE_S = 5.0

# Asks whoever may write devfreq (the node agent) for a GPU clock; None: release it.
ClockRequest = Callable[[int | None], None]
# Asks the node agent for a power mode (CPU cores, CPU clock cap Hz, EMC Hz); None: release it.
ModeRequest = Callable[[tuple[int, int, int] | None], None]


class DeviceSession:
    """GPU devfreq + power sampler under one sysfs root; on a twin, also its workload file.

    On a twin the minibatch time is the twin's simulated device time (its roofline model);
    on a real Jetson it is the measured wall time. `simulated` says which.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
        clock_request: ClockRequest | None = None,
        clock_timeout_s: float = AGENT_CLOCK_TIMEOUT_S,
        mode_request: ModeRequest | None = None,
    ) -> None:
        """`clock_request`, `mode_request`: GPU clocks and power modes are asked of the node
        agent and only read back here (a restricted pod's /sys is read-only); None: they are
        written here."""
        self.root: Path = resolve_root(root)
        self.clock_request = clock_request
        self.mode_request = mode_request
        self.clock_timeout_s = clock_timeout_s
        self.devfreq = GpuDevfreq.discover(self.root)
        self.sampler = PowerSampler(select_power_sensor(self.root), sample_interval_s)
        self.identity = detect_board(self.root)
        state = read_state(self.root)
        self.twin_board: str | None = state.board if state else None
        self._original_range: FrequencyRange | None = None

    @property
    def simulated(self) -> bool:
        """True when the tree belongs to a device twin."""
        return self.twin_board is not None

    @property
    def board_name(self) -> str:
        """Board slug (e.g. jetson-nano), or the devicetree model string."""
        return self.twin_board or self.identity.board_id or self.identity.model or "unknown"

    def __enter__(self) -> DeviceSession:
        if self.clock_request is None:  # the agent restores what it pinned itself
            self._original_range = self.devfreq.current_range()
        self.sampler.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Idle the twin, restore the GPU range found at entry (or release the clock asked of
        the agent), stop sampling."""
        self.sampler.stop()
        if self.simulated:
            self.set_workload(TwinWorkload(busy=False))
        if self.mode_request is not None:
            self.mode_request(None)
        if self.clock_request is not None:
            self.clock_request(None)
        if self._original_range is not None:
            self.devfreq.restore(self._original_range)
            self._original_range = None

    def pin(self, gpu_freq_hz: int) -> None:
        """Pin the GPU clock (or ask the node agent to) and wait until it reads back."""
        if self.clock_request is None:
            self.devfreq.pin(gpu_freq_hz)
            self.devfreq.wait_cur_freq(gpu_freq_hz)
            return
        self.clock_request(gpu_freq_hz)
        if not self.devfreq.wait_cur_freq(gpu_freq_hz, timeout_s=self.clock_timeout_s):
            raise DeviceError(
                f"asked the node agent for the GPU at {gpu_freq_hz} Hz, but cur_freq reads"
                f" {self.devfreq.cur_freq_hz()} Hz after {self.clock_timeout_s:g} s: is"
                " edgetrain's node agent running on this node, with no other pod on it"
                " holding another clock?")

    def await_agent_setting(
        self, gpu_freq_hz: int, mode: tuple[int, int, int] | None = None,
        mode_grace_s: float = MODE_GRACE_S,
    ) -> str | None:
        """Wait until the node agent holds this pod's GPU pin (min = max ≤ `gpu_freq_hz`: the
        guard or a lower pod's pin are later states) and its power mode (each control ≤ the
        mode's). The agent writes both in one pass, so a mode still missing `mode_grace_s`
        after the pin was refused (its PowerModeFailed Event): returns that as a warning."""
        deadline = time.monotonic() + self.clock_timeout_s
        while not self._pinned_at_most(gpu_freq_hz):
            if time.monotonic() >= deadline:
                cur = self.devfreq.current_range()
                raise DeviceError(
                    f"the node agent did not pin the GPU at {gpu_freq_hz} Hz in"
                    f" {self.clock_timeout_s:g} s (range {cur.min_freq_hz}-{cur.max_freq_hz} Hz):"
                    " is edgetrain's node agent running on this node?")
            time.sleep(0.05)
        board = self.board_name
        if mode is None or board not in BOARDS:
            return None
        reader = PowerModeWriter(self.root, board)
        deadline = time.monotonic() + mode_grace_s
        while True:
            now = reader.read()
            if now is not None and all(n <= w for n, w in zip(now, mode, strict=True)):
                return None
            if time.monotonic() >= deadline:
                return (f"power mode {mode} not set by the node agent (the device reads {now});"
                        " training in the board's current mode: see the pod's PowerModeFailed"
                        " Event")
            time.sleep(0.05)

    def _pinned_at_most(self, gpu_freq_hz: int) -> bool:
        cur = self.devfreq.current_range()
        return cur.min_freq_hz == cur.max_freq_hz <= gpu_freq_hz

    def set_workload(self, workload: TwinWorkload) -> None:
        """Tell a twin what trains now (a real board needs no telling)."""
        if self.simulated:
            write_workload(self.root, workload)

    def minibatch_time_s(self, workload: TwinWorkload, gpu_freq_hz: int, wall_s: float) -> float:
        """Device time of one minibatch: the twin's model, or the measured wall time."""
        truth = self.minibatch_truth(workload, gpu_freq_hz)
        return wall_s if truth is None else truth.time_per_batch_s

    def minibatch_truth(self, workload: TwinWorkload, gpu_freq_hz: int) -> GroundTruth | None:
        """On a twin, its model of one minibatch in the current power mode (None on a board)."""
        if not self.simulated:
            return None
        state = read_state(self.root)
        mode = (
            PowerMode(
                cpu_cores=state.cpu_cores,
                cpu_freq_hz=state.cpu_freq_hz,
                emc_freq_hz=state.emc_freq_hz,
            )
            if state
            else None
        )
        cost = workload_cost(workload.model, workload.input_shape, workload.num_classes)
        return ground_truth(self.board_name, cost, workload.batch_size, gpu_freq_hz, mode)


class SessionMeter:
    """Device time and energy of training steps on a session (twin: simulated device time).

    On a board, energy integrates the sampled power over each step and peak is the largest
    sample. On a twin, each minibatch is the twin's model of it (time, mean and busy power in
    the current mode): its live sensor cycles busy/gap on the host's clock, which a CPU-bound
    trainer samples at random phases, so sampling it would read a fast GPU as mostly idle.
    """

    def __init__(
        self, session: DeviceSession, workload: TwinWorkload, max_trace_points: int = 4096
    ) -> None:
        self.session = session
        self.workload = workload
        self._usage = DeviceUsage(energy_j=0.0, peak_power_w=0.0, simulated=session.simulated)
        self._seen_until_s = time.monotonic()
        # (device seconds at the end of a stretch of minibatches, mean W over it): the trace on
        # the device's own clock, so a twin's host-side gaps (CPU training is slower than the
        # simulated GPU) do not show as idle device time.
        self._trace: list[tuple[float, float, float]] = []  # (end s, energy J, device s)
        self._max_trace_points = max(2, max_trace_points)

    def step(self, batch_size: int, wall_s: float) -> None:
        """Account one minibatch."""
        now = time.monotonic()
        freq = self.session.devfreq.cur_freq_hz()
        truth = self.session.minibatch_truth(self.workload, freq)
        recent = self.session.sampler.samples(self._seen_until_s, now)
        self._seen_until_s = now
        if truth is not None:
            device_s, power_w, peaks = truth.time_per_batch_s, truth.mean_power_w, [
                truth.peak_power_w
            ]
        else:
            device_s, peaks = wall_s, [s.power_w for s in recent]
            power_w = (
                sum(peaks) / len(peaks) if peaks else self.session.sampler.source.read_total_w()
            )
        usage = self._usage
        usage.device_time_s += device_s
        usage.energy_j = (usage.energy_j or 0.0) + power_w * device_s
        usage.peak_power_w = max([usage.peak_power_w or 0.0, *peaks])
        self._trace.append((usage.device_time_s, power_w * device_s, device_s))
        if len(self._trace) > self._max_trace_points:
            # Halve the resolution, keeping energy: a long training's trace stays bounded.
            pairs = zip(self._trace[0::2], self._trace[1::2], strict=False)
            merged = [(b[0], a[1] + b[1], a[2] + b[2]) for a, b in pairs]
            if len(self._trace) % 2:
                merged.append(self._trace[-1])
            self._trace = merged

    def power_trace(self) -> list[tuple[float, float]]:
        """(device seconds since the meter started, mean board W over the stretch ending then)."""
        return [(t, e / d if d > 0 else 0.0) for t, e, d in self._trace]

    def usage(self) -> DeviceUsage:
        """Totals so far."""
        return self._usage.model_copy()

    def restore(self, usage: DeviceUsage) -> None:
        """Continue from saved totals."""
        self._usage = usage.model_copy(update={"simulated": self.session.simulated})
