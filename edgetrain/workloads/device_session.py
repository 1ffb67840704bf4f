"""The device a workload runs on: frequency control and power sampling, real board or twin."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import TracebackType

from edgetrain.api.training import DeviceUsage
from edgetrain.device import (
    FrequencyRange,
    GpuDevfreq,
    PowerSampler,
    detect_board,
    resolve_root,
    select_power_sensor,
)
from edgetrain.device.sim import PowerMode, TwinWorkload, ground_truth, read_state, write_workload
from edgetrain.workloads import workload_cost

DEFAULT_SAMPLE_INTERVAL_S = 0.05


class DeviceSession:
    """GPU devfreq + power sampler under one sysfs root; on a twin, also its workload file.

    On a twin the minibatch time is the twin's simulated device time (its roofline model);
    on a real Jetson it is the measured wall time. `simulated` says which.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
    ) -> None:
        self.root: Path = resolve_root(root)
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
        """Idle the twin, restore the GPU range found at entry, stop sampling."""
        self.sampler.stop()
        if self.simulated:
            self.set_workload(TwinWorkload(busy=False))
        if self._original_range is not None:
            self.devfreq.restore(self._original_range)
            self._original_range = None

    def pin(self, gpu_freq_hz: int) -> None:
        """Pin the GPU clock and wait until it reads back."""
        self.devfreq.pin(gpu_freq_hz)
        self.devfreq.wait_cur_freq(gpu_freq_hz)

    def set_workload(self, workload: TwinWorkload) -> None:
        """Tell a twin what trains now (a real board needs no telling)."""
        if self.simulated:
            write_workload(self.root, workload)

    def minibatch_time_s(self, workload: TwinWorkload, gpu_freq_hz: int, wall_s: float) -> float:
        """Device time of one minibatch: the twin's model, or the measured wall time."""
        if not self.simulated:
            return wall_s
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
        truth = ground_truth(self.board_name, cost, workload.batch_size, gpu_freq_hz, mode)
        return truth.time_per_batch_s


class SessionMeter:
    """Device time and energy of training steps on a session (twin: simulated device time).

    Energy integrates the sampled board power over each step's device time; peak is the largest
    sample seen while training. Both come from the power sensor, real or twin.
    """

    def __init__(self, session: DeviceSession, workload: TwinWorkload) -> None:
        self.session = session
        self.workload = workload
        self._usage = DeviceUsage(energy_j=0.0, peak_power_w=0.0, simulated=session.simulated)
        self._seen_until_s = time.monotonic()

    def step(self, batch_size: int, wall_s: float) -> None:
        """Account one minibatch."""
        now = time.monotonic()
        freq = self.session.devfreq.cur_freq_hz()
        device_s = self.session.minibatch_time_s(self.workload, freq, wall_s)
        recent = self.session.sampler.samples(self._seen_until_s, now)
        self._seen_until_s = now
        power_w = (
            sum(s.power_w for s in recent) / len(recent)
            if recent
            else self.session.sampler.source.read_total_w()
        )
        usage = self._usage
        usage.device_time_s += device_s
        usage.energy_j = (usage.energy_j or 0.0) + power_w * device_s
        usage.peak_power_w = max([usage.peak_power_w or 0.0, *(s.power_w for s in recent)])

    def usage(self) -> DeviceUsage:
        """Totals so far."""
        return self._usage.model_copy()

    def restore(self, usage: DeviceUsage) -> None:
        """Continue from saved totals."""
        self._usage = usage.model_copy(update={"simulated": self.session.simulated})
