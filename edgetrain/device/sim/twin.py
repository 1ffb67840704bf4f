"""DeviceTwin: a live sysfs tree of a simulated Jetson, animated by the physics model.

Over 500 lines because it is one class whose parts share its lock and state: the tree it builds,
the kernel-like write hook, and the tick that rewrites the live files (the physics is apart, in
physics.py, and the board facts in boards.py).

The tree has the real layout (devfreq + INA3221 in IIO or hwmon form, devicetree, L4T file,
thermal zones, cpufreq, EMC debugfs), so the device layer reads and writes it with the same
code it runs on a Jetson. Frequency writes made in this process go through a write hook
(edgetrain.device.sysfs) that validates like the kernel, including the 4.9 ordering EINVAL;
writes from other processes land in plain files and are reconciled on the next tick (snapped
to the table; on 4.9 boards a write that breaks min <= max is reverted, as if it had failed).
"""

from __future__ import annotations

import bisect
import errno
import json
import logging
import math
import os
import random
import threading
import time
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Literal

from pydantic import BaseModel, ConfigDict

from edgetrain.api.workload import CostFunction, WorkloadCost
from edgetrain.device.errors import DeviceError
from edgetrain.device.sim.boards import BoardSpec, SensorSpec
from edgetrain.device.sim.control import (
    STATE_FILE,
    TWIN_DIR,
    WORKLOAD_FILE,
    TwinState,
    TwinWorkload,
    atomic_write,
    read_workload,
    write_workload,
)
from edgetrain.device.sim.physics import (
    FullPowerMode,
    GroundTruth,
    PowerComponents,
    PowerMode,
    get_board,
    ground_truth,
    idle_power,
    max_power_mode,
)
from edgetrain.device.sysfs import (
    as_stored,
    register_write_hook,
    store_in_place,
    unregister_write_hook,
)

log = logging.getLogger(__name__)

SHUNT_MILLIOHM = 5.0  # ESTIMATE: shunt resistor used only for the hwmon in4-in7 files
THERMAL_FILE_PERIOD_S = 0.25
STATE_FILE_PERIOD_S = 1.0
# How long devfreq files may read empty or inverted before the twin calls the store failed:
# longer than a busy writer takes between its truncate and write, or between its two stores.
DEVFREQ_REPAIR_S = 1.0
DECOY_DEVFREQ = ("15340000.vic", "vic")  # a non-GPU devfreq node discovery must skip


class TracePoint(BaseModel):
    """One tick: the total a reader of the files would compute, and the noise-free model value."""

    model_config = ConfigDict(frozen=True)

    timestamp_s: float
    total_power_w: float
    model_power_w: float
    gpu_freq_hz: int
    phase: Literal["idle", "gpu-busy", "gap"]


def _rel_symlink(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))



def _first_word(path: str) -> str:
    """A small attribute file's first word (IndexError when empty), without pathlib or a
    text wrapper: the twin reads several each tick."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 256).split()[0].decode()
    finally:
        os.close(fd)

class DeviceTwin:
    """A simulated Jetson rooted at `root`; use as a context manager to build, run and stop it."""

    def __init__(
        self,
        board: str | BoardSpec,
        root: str | os.PathLike[str],
        *,
        tick_s: float = 0.02,
        seed: int = 0,
        noise_rel: float = 0.01,
        thermal_throttle: bool = False,
        throttle_c: float | None = None,
        thermal_tau_s: float | None = None,
        power_settle_tau_s: float | None = None,
        trace_len: int = 200_000,
        cost_of: CostFunction | None = None,
    ) -> None:
        self.spec = get_board(board)
        # The owner counts FLOPs (that needs the PyTorch models); the twin only simulates.
        self._cost_of = cost_of
        self.root = Path(root)
        self.tick_s = tick_s
        self.noise_rel = noise_rel
        self.thermal_throttle = thermal_throttle
        p = self.spec.physics
        self.throttle_c = p.throttle_c if throttle_c is None else throttle_c
        self.thermal_tau_s = p.thermal_tau_s if thermal_tau_s is None else thermal_tau_s
        self.settle_tau_s = (
            p.power_settle_tau_s if power_settle_tau_s is None else power_settle_tau_s
        )
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._trace: deque[TracePoint] = deque(maxlen=trace_len)
        self.table = sorted(self.spec.gpu_freqs_hz)
        self.devfreq_dir = self.root / self.spec.gpu_device_dir / "devfreq" / self.spec.devfreq_name
        self._min_hz = self.table[0]
        self._max_hz = self.table[-1]
        self._devfreq_odd_since: float | None = None
        self._mode = max_power_mode(self.spec)
        self._mode_read_at = -math.inf
        self._workload = TwinWorkload()
        self._workload_mtime = -1
        self._workload_start_s = 0.0
        self._temp_c = p.ambient_c
        self._throttle_steps = 0
        self._throttle_changed_s = -math.inf
        self._last_tick_s: float | None = None
        self._lvl_busy = idle_power(self.spec, self._mode)
        self._lvl_gap = self._lvl_busy
        self._cur_hz = self._min_hz
        self._gt_cache: dict[tuple[object, ...], GroundTruth] = {}
        self._written: dict[str, str] = {}
        self._dirs: dict[str | Path, str] = {}
        self._thermal_written_s = -math.inf
        self._state_written_s = -math.inf
        self._state_slow: tuple[object, ...] = ()
        self.built = False

    def _dir(self, rel: str | Path) -> str:
        """A directory of the tree as a string, joined once (pathlib cost more than the I/O)."""
        d = self._dirs.get(rel)
        if d is None:
            d = self._dirs[rel] = os.fspath(self.root / rel)
        return d

    def _put(self, path: str | Path, text: str) -> None:
        """Store a live file's new value in place, as a kernel attribute changes: one inode, one
        short write, then the file cut to its length. Skipped when the content is unchanged."""
        key = os.fspath(path)
        if self._written.get(key) == text:
            return
        store_in_place(key, text.encode())
        self._written[key] = text

    # ----------------------------------------------------------------- building
    def build(self) -> DeviceTwin:
        """Create the sysfs tree (idempotent) and register the in-process write hook."""
        s, r = self.spec, self.root
        r.mkdir(parents=True, exist_ok=True)
        dt = r / "sys/firmware/devicetree/base"
        dt.mkdir(parents=True, exist_ok=True)
        (dt / "model").write_bytes(s.devicetree_model.encode() + b"\0")
        (dt / "compatible").write_bytes(s.compatible.encode() + b"\0")
        _rel_symlink(r / "proc/device-tree", dt)
        (r / "etc").mkdir(exist_ok=True)
        (r / "etc/nv_tegra_release").write_text(s.l4t_release + "\n")
        (r / "proc/sys/kernel").mkdir(parents=True, exist_ok=True)
        (r / "proc/sys/kernel/osrelease").write_text(s.kernel_release + "\n")
        self._build_devfreq(
            s.gpu_device_dir,
            s.gpu_of_node_dir,
            s.gpu_of_node_name,
            s.devfreq_name,
            self.table,
            gpu=True,
        )
        decoy_name, decoy_node = DECOY_DEVFREQ
        self._build_devfreq(
            f"sys/devices/{decoy_name}",
            f"sys/firmware/devicetree/base/{decoy_node}@15340000",
            decoy_node,
            decoy_name,
            [115_200_000, 1_036_800_000],
            gpu=False,
        )
        for sensor in s.sensors:
            self._build_sensor(sensor)
        for i, zone in enumerate(s.thermal_zones):
            zdir = r / f"sys/class/thermal/thermal_zone{i}"
            zdir.mkdir(parents=True, exist_ok=True)
            (zdir / "type").write_text(zone + "\n")
            (zdir / "temp").write_text(f"{int(s.physics.ambient_c * 1000)}\n")
        self._build_cpu_emc()
        (r / TWIN_DIR).mkdir(parents=True, exist_ok=True)
        (r / TWIN_DIR / "board").write_text(s.name + "\n")
        if not (r / WORKLOAD_FILE).exists():
            write_workload(r, TwinWorkload())
        register_write_hook(r, self._on_write)
        self.built = True
        self.tick()
        return self

    def _build_devfreq(
        self, dev_dir: str, of_dir: str, of_name: str, name: str, table: list[int], *, gpu: bool
    ) -> None:
        r = self.root
        device = r / dev_dir
        of_node = r / of_dir
        of_node.mkdir(parents=True, exist_ok=True)
        (of_node / "name").write_bytes(of_name.encode() + b"\0")
        _rel_symlink(device / "of_node", of_node)
        # What the kernel's of_device_uevent() writes for a devicetree device: readable where a
        # container runtime masks /sys/firmware (the of_node link's target).
        full = "/" + of_dir.removeprefix("sys/firmware/devicetree/base/")
        (device / "uevent").write_text(f"OF_NAME={of_name}\nOF_FULLNAME={full}\n")
        node = device / "devfreq" / name
        node.mkdir(parents=True, exist_ok=True)
        _rel_symlink(node / "device", device)
        _rel_symlink(r / "sys/class/devfreq" / name, node)
        (node / "available_frequencies").write_text(" ".join(map(str, table)) + "\n")
        (node / "available_governors").write_text(
            "nvhost_podgov userspace performance simple_ondemand\n"
        )
        (node / "governor").write_text("nvhost_podgov\n")
        (node / "min_freq").write_text(f"{table[0]}\n")
        (node / "max_freq").write_text(f"{table[-1]}\n")
        (node / "cur_freq").write_text(f"{table[0]}\n")
        (node / "trans_stat").write_text("")
        if gpu:
            (device / "load").write_text("0\n")
            (device / "railgate_enable").write_text("1\n")

    def _build_sensor(self, sensor: SensorSpec) -> None:
        d = self.root / sensor.path
        d.mkdir(parents=True, exist_ok=True)
        (d / "name").write_text(f"{sensor.driver}\n")
        for ch, label in sensor.channels.items():
            if sensor.driver == "ina3221x":
                (d / f"rail_name_{ch}").write_text(label + "\n")
                (d / f"warn_current_limit_{ch}").write_text("32760\n")
                (d / f"crit_current_limit_{ch}").write_text("32760\n")
            else:
                (d / f"in{ch}_label").write_text(label + "\n")
                (d / f"curr{ch}_max").write_text("32760\n")
                (d / f"curr{ch}_crit").write_text("32760\n")
        if sensor.driver == "ina3221":
            (d / "in7_label").write_text("sum of shunt voltages\n")  # skipped by readers [R1]
            (d / "update_interval").write_text("10\n")
            (d / "samples").write_text("4\n")
        self._write_sensor(sensor, {label: 0.0 for label in sensor.channels.values()})

    def _build_cpu_emc(self) -> None:
        s, r = self.spec, self.root
        cpu = r / "sys/devices/system/cpu"
        cpu.mkdir(parents=True, exist_ok=True)
        # The CPU lists a Jetson has (torch's cpuinfo fails without `possible` and `present`
        # when a container sees this directory in place of its host's).
        for name in ("online", "possible", "present"):
            (cpu / name).write_text(f"0-{s.cpu_cores - 1}\n")
        (cpu / "offline").write_text("\n")
        (cpu / "kernel_max").write_text(f"{s.cpu_cores - 1}\n")
        khz = sorted(f // 1000 for f in s.cpu_freqs_hz)
        for i in range(s.cpu_cores):
            (cpu / f"cpu{i}/cpufreq").mkdir(parents=True, exist_ok=True)
            if i > 0:
                (cpu / f"cpu{i}/online").write_text("1\n")
            cf = cpu / f"cpu{i}/cpufreq"
            (cf / "scaling_available_frequencies").write_text(" ".join(map(str, khz)) + "\n")
            (cf / "cpuinfo_max_freq").write_text(f"{khz[-1]}\n")
            (cf / "cpuinfo_min_freq").write_text(f"{khz[0]}\n")
            (cf / "scaling_max_freq").write_text(f"{khz[-1]}\n")
            (cf / "scaling_min_freq").write_text(f"{khz[0]}\n")
            (cf / "scaling_cur_freq").write_text(f"{khz[-1]}\n")
        emc = r / s.emc_debugfs_dir
        emc.mkdir(parents=True, exist_ok=True)
        top = max(s.emc_freqs_hz)
        (emc / self._emc_rate_name()).write_text(f"{top}\n")
        (emc / "max_rate").write_text(f"{top}\n")
        (emc / "min_rate").write_text(f"{min(s.emc_freqs_hz)}\n")

    def _emc_rate_name(self) -> str:
        return "rate" if "bpmp" in self.spec.emc_debugfs_dir else "clk_rate"

    # ------------------------------------------------------------ control API
    def set_workload(
        self,
        model: str = "resnet18",
        batch_size: int = 64,
        *,
        busy: bool = True,
        input_shape: tuple[int, ...] = (3, 32, 32),
        num_classes: int = 10,
    ) -> None:
        """Start (busy=True) or describe a training workload; other processes use the file."""
        write_workload(
            self.root,
            TwinWorkload(
                model=model,
                batch_size=batch_size,
                busy=busy,
                input_shape=input_shape,
                num_classes=num_classes,
            ),
        )
        self.tick()

    def set_idle(self) -> None:
        """Stop the simulated training (the board idles)."""
        write_workload(self.root, self._workload.model_copy(update={"busy": False}))
        self.tick()

    def set_power_mode(self, mode: PowerMode) -> None:
        """Apply CPU cores / CPU clock / EMC clock (and the GPU clock for a FullPowerMode)."""
        s, r = self.spec, self.root
        if mode.cpu_freq_hz not in s.cpu_freqs_hz or mode.emc_freq_hz not in s.emc_freqs_hz:
            raise ValueError(f"{s.name}: mode {mode} is not in the board's CPU/EMC tables")
        if not 1 <= mode.cpu_cores <= s.cpu_cores:
            raise ValueError(f"{s.name}: cpu_cores must be in 1..{s.cpu_cores}")
        cpu = r / "sys/devices/system/cpu"
        for i in range(1, s.cpu_cores):
            store_in_place(cpu / f"cpu{i}/online", b"1\n" if i < mode.cpu_cores else b"0\n")
        for i in range(s.cpu_cores):
            store_in_place(cpu / f"cpu{i}/cpufreq/scaling_max_freq",
                           f"{mode.cpu_freq_hz // 1000}\n".encode())
        store_in_place(r / s.emc_debugfs_dir / self._emc_rate_name(),
                       f"{mode.emc_freq_hz}\n".encode())
        if isinstance(mode, FullPowerMode):
            self._apply_range(mode.gpu_freq_hz, mode.gpu_freq_hz)
        self._mode_read_at = -math.inf
        self.tick()

    def ground_truth(
        self,
        batch_size: int,
        gpu_freq_hz: int,
        mode: PowerMode | None = None,
        model: str | None = None,
    ) -> GroundTruth:
        """The model's exact figures for this board (defaults: current workload and mode)."""
        wl = self._workload
        cost = self._cost(model or wl.model, wl.input_shape, wl.num_classes)
        return ground_truth(self.spec, cost, batch_size, gpu_freq_hz, mode or self._mode)

    def _cost(self, model: str, input_shape: tuple[int, ...], num_classes: int) -> WorkloadCost:
        if self._cost_of is None:
            raise DeviceError(
                f"the twin of {self.spec.name} was started without a cost function and cannot"
                f" simulate {model}; pass cost_of=edgetrain.workloads.models.workload_cost"
            )
        return self._cost_of(model, input_shape, num_classes)

    def current_mode(self) -> PowerMode:
        """The power mode last read from the tree."""
        return self._mode

    # --------------------------------------------------------- devfreq writes
    def _snap(self, freq_hz: int) -> int:
        """Round up to the next OPP, as devfreq does (e.g. 950 -> 998.4 MHz on a Nano [R22])."""
        i = bisect.bisect_left(self.table, freq_hz)
        return self.table[min(i, len(self.table) - 1)]

    def _on_write(self, path: Path, value: str) -> None:
        real = Path(os.path.realpath(path))
        if real.parent == Path(os.path.realpath(self.devfreq_dir)) and real.name in (
            "min_freq",
            "max_freq",
        ):
            try:
                freq = int(value.strip())
            except ValueError:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), str(path)) from None
            with self._lock:
                if self.spec.order_sensitive_devfreq and (
                    (real.name == "min_freq" and freq > self._max_hz)
                    or (real.name == "max_freq" and freq < self._min_hz)
                ):
                    # 4.9 min_freq_store/max_freq_store return -EINVAL [R21]
                    raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), str(path))
                if real.name == "min_freq":
                    self._apply_range(self._snap(freq), self._max_hz)
                else:
                    self._apply_range(self._min_hz, self._snap(freq))
            return
        if real.name == "governor":
            options = (real.parent / "available_governors").read_text().split()
            if value.strip() not in options:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), str(path))
        store_in_place(real, as_stored(value))

    def _apply_range(self, min_hz: int, max_hz: int) -> None:
        with self._lock:
            self._min_hz, self._max_hz = min_hz, max_hz
            # In place, never a new inode: a writer in another process that opened the file
            # just before would otherwise store into the replaced one, and its store be lost.
            store_in_place(self.devfreq_dir / "min_freq", f"{min_hz}\n".encode())
            store_in_place(self.devfreq_dir / "max_freq", f"{max_hz}\n".encode())

    def _reconcile_devfreq(self, now: float) -> None:
        """Accept (snapped) values other processes wrote straight into the files."""
        node = self._dir(self.devfreq_dir)
        try:
            fmin = int(_first_word(f"{node}/min_freq"))
            fmax = int(_first_word(f"{node}/max_freq"))
        except (OSError, ValueError, IndexError):
            # Caught between another process's truncate and write: look again next tick
            # (rewriting our stale range now would undo that store). A kernel attribute is
            # never empty, so once the writer has plainly died there, put the range back.
            if self._devfreq_odd_for(now):
                self._apply_range(self._min_hz, self._max_hz)
            return
        if (fmin, fmax) == (self._min_hz, self._max_hz):
            self._devfreq_odd_since = None
            return
        new_min, new_max = self._snap(fmin), self._snap(fmax)
        if new_min > new_max and self.spec.order_sensitive_devfreq:
            # Two files read between another process's two stores look inverted; only a pair
            # that stays inverted is a store the 4.9 kernel would have failed.
            if self._devfreq_odd_for(now):
                self._apply_range(self._min_hz, self._max_hz)
            return
        self._devfreq_odd_since = None
        if (new_min, new_max) == (fmin, fmax):
            # Valid values another process wrote: adopt them without rewriting the files, or a
            # rewrite from this stale read could undo that process's next store (lost update).
            self._min_hz, self._max_hz = new_min, new_max
            return
        self._apply_range(new_min, new_max)

    def _devfreq_odd_for(self, now: float) -> bool:
        """True once the devfreq files have read empty or inverted for DEVFREQ_REPAIR_S."""
        if self._devfreq_odd_since is None:
            self._devfreq_odd_since = now
        if now - self._devfreq_odd_since < DEVFREQ_REPAIR_S:
            return False
        self._devfreq_odd_since = None
        return True

    # ------------------------------------------------------------------ ticks
    def _read_mode(self, now: float) -> None:
        if now - self._mode_read_at < 0.25:
            return
        self._mode_read_at = now
        s, cpu = self.spec, self._dir("sys/devices/system/cpu")
        try:
            cores = 1 + sum(
                _first_word(f"{cpu}/cpu{i}/online") == "1" for i in range(1, s.cpu_cores)
            )
            cpu_hz = int(_first_word(f"{cpu}/cpu0/cpufreq/scaling_max_freq")) * 1000
            emc_hz = int(_first_word(f"{self._dir(s.emc_debugfs_dir)}/{self._emc_rate_name()}"))
        except (OSError, ValueError, IndexError):
            return
        cpu_hz = min(s.cpu_freqs_hz, key=lambda f: abs(f - cpu_hz))
        emc_hz = min(s.emc_freqs_hz, key=lambda f: abs(f - emc_hz))
        self._mode = PowerMode(cpu_cores=cores, cpu_freq_hz=cpu_hz, emc_freq_hz=emc_hz)

    def _read_workload(self, now: float) -> None:
        path = self.root / WORKLOAD_FILE
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return
        if mtime == self._workload_mtime:
            return
        wl = read_workload(self.root)
        self._workload_mtime = mtime
        if wl is None:
            return
        if wl != self._workload:
            self._workload_start_s = now
        self._workload = wl

    def _effective_freq(self, busy: bool, now: float) -> int:
        """Governor + thermal cap: busy -> max_freq, idle -> min_freq, minus throttle steps."""
        target = self._max_hz if busy else self._min_hz
        idx = self.table.index(target) if target in self.table else len(self.table) - 1
        if self.thermal_throttle and now - self._throttle_changed_s >= 0.5:
            if self._temp_c > self.throttle_c and idx - self._throttle_steps > 0:
                self._throttle_steps += 1
                self._throttle_changed_s = now
            elif self._temp_c < self.throttle_c - 5.0 and self._throttle_steps > 0:
                self._throttle_steps -= 1
                self._throttle_changed_s = now
        if not self.thermal_throttle:
            self._throttle_steps = 0
        return self.table[max(0, idx - self._throttle_steps)]

    def _gt(self, wl: TwinWorkload, freq_hz: int) -> GroundTruth:
        key = (wl.model, wl.input_shape, wl.num_classes, wl.batch_size, freq_hz, self._mode)
        gt = self._gt_cache.get(key)
        if gt is None:
            cost = self._cost(wl.model, wl.input_shape, wl.num_classes)
            gt = ground_truth(self.spec, cost, wl.batch_size, freq_hz, self._mode)
            self._gt_cache[key] = gt
        return gt

    def tick(self, now: float | None = None) -> TracePoint:
        """Advance the simulation to `now` (monotonic) and rewrite the live files."""
        with self._lock:
            now = time.monotonic() if now is None else now
            dt = 0.0 if self._last_tick_s is None else max(0.0, now - self._last_tick_s)
            self._last_tick_s = now
            self._reconcile_devfreq(now)
            self._read_mode(now)
            self._read_workload(now)
            wl = self._workload
            freq = self._effective_freq(wl.busy, now)
            self._cur_hz = freq
            idle = idle_power(self.spec, self._mode)
            phase: Literal["idle", "gpu-busy", "gap"] = "idle"
            load = 0
            if wl.busy:
                gt = self._gt(wl, freq)
                target_busy, target_gap = gt.busy, gt.gap
                pos = (now - self._workload_start_s) % gt.time_per_batch_s
                phase = "gpu-busy" if pos < gt.gpu_busy_s else "gap"
                load = round(1000 * gt.gpu_busy_s / gt.time_per_batch_s)
            else:
                target_busy = target_gap = idle
            # Power settles with a first-order lag after any change (PT §2.5: 2-3 s).
            alpha = 1.0 if self.settle_tau_s <= 0 else 1.0 - math.exp(-dt / self.settle_tau_s)
            self._lvl_busy = _blend(self._lvl_busy, target_busy, alpha)
            self._lvl_gap = _blend(self._lvl_gap, target_gap, alpha)
            comps = self._lvl_gap if phase == "gap" else self._lvl_busy
            if phase == "idle":
                comps = self._lvl_busy
            p = self.spec.physics
            steady = p.ambient_c + p.thermal_c_per_w * comps.total_w
            beta = 1.0 if self.thermal_tau_s <= 0 else 1.0 - math.exp(-dt / self.thermal_tau_s)
            self._temp_c += (steady - self._temp_c) * beta
            total_w = self._write_rails(comps)
            self._write_live(freq, load, now)
            point = TracePoint(
                timestamp_s=now,
                total_power_w=total_w,
                model_power_w=comps.total_w,
                gpu_freq_hz=freq,
                phase=phase,
            )
            self._trace.append(point)
            # What readers of the state wait for (the mode, the clock, throttling, the
            # workload) at once; the rest (power, temperature) at least once a second. A
            # rename per tick cost more than the rest of the tick together.
            slow = (freq, self._throttle_steps, self._workload, self._mode)
            if slow != self._state_slow or now - self._state_written_s >= STATE_FILE_PERIOD_S:
                self._state_slow = slow
                self._state_written_s = now
                self._write_state(now, point)
            return point

    def _write_rails(self, comps: PowerComponents) -> float:
        values = comps.as_dict()
        rails: dict[str, float] = {}
        for rail, weights in self.spec.rail_components.items():
            mw = 1000.0 * sum(values[c] * w for c, w in weights.items())
            if self.noise_rel > 0:
                mw *= 1.0 + self._rng.gauss(0.0, self.noise_rel)
            rails[rail] = max(0.0, mw)
        seen: dict[str, float] = {}
        for sensor in self.spec.sensors:
            seen.update(self._write_sensor(sensor, rails))
        if self.spec.total_rail is not None:
            return seen[self.spec.total_rail] / 1000.0
        return sum(seen.values()) / 1000.0

    def _write_sensor(self, sensor: SensorSpec, rails: dict[str, float]) -> dict[str, float]:
        """Write one chip's files; returns rail -> mW exactly as a reader will compute it."""
        d = self._dir(sensor.path)
        out: dict[str, float] = {}
        shunt_sum_mv = 0.0
        for ch, label in sensor.channels.items():
            mw = 0.0 if label == "NC" else rails.get(label, 0.0)
            mv = sensor.voltages_mv.get(label, 5000)
            ma = round(mw * 1000.0 / mv) if mv else 0
            if sensor.driver == "ina3221x":
                self._put(f"{d}/in_power{ch}_input", f"{round(mw)}\n")
                self._put(f"{d}/in_voltage{ch}_input", f"{mv}\n")
                self._put(f"{d}/in_current{ch}_input", f"{ma}\n")
                reported = float(round(mw))
            else:
                shunt_mv = ma * SHUNT_MILLIOHM / 1000.0
                shunt_sum_mv += shunt_mv
                self._put(f"{d}/in{ch}_input", f"{mv}\n")
                self._put(f"{d}/curr{ch}_input", f"{ma}\n")
                self._put(f"{d}/in{ch + 3}_input", f"{round(shunt_mv)}\n")
                reported = mv * ma / 1000.0
            if label != "NC":
                out[label] = reported
        if sensor.driver == "ina3221":
            self._put(f"{d}/in7_input", f"{round(shunt_sum_mv)}\n")
        return out

    def _write_live(self, freq_hz: int, load_permille: int, now: float) -> None:
        self._put(f"{self._dir(self.devfreq_dir)}/cur_freq", f"{freq_hz}\n")
        device = self._dir(self.spec.gpu_device_dir)
        self._put(f"{device}/load", f"{load_permille}\n")
        self._put(f"{device}/railgate_enable", "1\n")
        if now - self._thermal_written_s < THERMAL_FILE_PERIOD_S:
            return  # temperatures move slowly; real zones update about once a second
        self._thermal_written_s = now
        p = self.spec.physics
        for i, zone in enumerate(self.spec.thermal_zones):
            # GPU zone reads the model temperature; others sit a little cooler (ESTIMATE).
            offset = 0.0 if "gpu" in zone.lower() else -2.0 - i * 0.5
            temp = max(p.ambient_c, self._temp_c + offset)
            self._put(
                self.root / f"sys/class/thermal/thermal_zone{i}/temp", f"{round(temp * 1000)}\n"
            )

    def _write_state(self, now: float, point: TracePoint) -> None:
        state = TwinState(
            board=self.spec.name,
            timestamp_s=now,
            gpu_freq_hz=point.gpu_freq_hz,
            phase=point.phase,
            total_power_w=point.total_power_w,
            gpu_temp_c=self._temp_c,
            throttle_steps=self._throttle_steps,
            workload=self._workload,
            cpu_cores=self._mode.cpu_cores,
            cpu_freq_hz=self._mode.cpu_freq_hz,
            emc_freq_hz=self._mode.emc_freq_hz,
        )
        atomic_write(self.root / STATE_FILE, json.dumps(state.model_dump(mode="json")))

    # --------------------------------------------------------------- running
    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                self.tick()
            except OSError as exc:
                # A tick that cannot store a file tries again on the next one; a dead thread
                # would freeze the device for good.
                log.warning("twin %s: tick failed: %s", self.root, exc)
            next_t += self.tick_s
            delay = next_t - time.monotonic()
            if delay < 0:
                next_t = time.monotonic()
                delay = 0.0
            self._stop.wait(delay)

    def start(self) -> DeviceTwin:
        """Build if needed and start the update thread."""
        if not self.built:
            self.build()
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="device-twin", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the update thread and remove the write hook (the tree stays on disk)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        unregister_write_hook(self.root)

    def __enter__(self) -> DeviceTwin:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --------------------------------------------------------------- reading
    def trace(self, start_s: float | None = None, end_s: float | None = None) -> list[TracePoint]:
        """Ticks with start_s <= timestamp <= end_s."""
        with self._lock:
            pts = list(self._trace)
        return [
            p
            for p in pts
            if (start_s is None or p.timestamp_s >= start_s)
            and (end_s is None or p.timestamp_s <= end_s)
        ]

    def average_power_w(self, start_s: float, end_s: float) -> tuple[float, float, float]:
        """(mean W, peak W, energy J) of the files' total over [start_s, end_s], exactly.

        The files hold each tick's value until the next tick, so the trace is a step function.
        """
        with self._lock:
            pts = list(self._trace)
        if end_s <= start_s:
            raise ValueError("end_s must be after start_s")
        energy, peak = 0.0, 0.0
        for i, p in enumerate(pts):
            seg_start = max(p.timestamp_s, start_s)
            seg_end = min(pts[i + 1].timestamp_s if i + 1 < len(pts) else end_s, end_s)
            if seg_end > seg_start:
                energy += p.total_power_w * (seg_end - seg_start)
                peak = max(peak, p.total_power_w)
        return energy / (end_s - start_s), peak, energy

    @property
    def gpu_temp_c(self) -> float:
        """Current simulated GPU temperature."""
        return self._temp_c

    @property
    def cur_freq_hz(self) -> int:
        """Current effective GPU clock."""
        return self._cur_hz


def _blend(old: PowerComponents, new: PowerComponents, alpha: float) -> PowerComponents:
    if alpha >= 1.0:
        return new
    return PowerComponents(
        idle_w=old.idle_w + (new.idle_w - old.idle_w) * alpha,
        cpu_w=old.cpu_w + (new.cpu_w - old.cpu_w) * alpha,
        gpu_w=old.gpu_w + (new.gpu_w - old.gpu_w) * alpha,
        mem_w=old.mem_w + (new.mem_w - old.mem_w) * alpha,
    )
