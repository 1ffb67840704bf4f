"""GPU frequency control through devfreq sysfs: discover the node, read the table, pin, restore.

Discovery follows jtop [R2]: scan `sys/class/devfreq/*` and match `device/of_node/name`
against the known GPU names. Values are in Hz.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from edgetrain.device.errors import (
    DevfreqNotFoundError,
    FrequencyWriteError,
    SensorReadError,
    UnsupportedFrequencyError,
)
from edgetrain.device.sysfs import read_int, read_text, resolve_root, write_value

#: devicetree node names of Jetson GPUs [R2] (gb10b: Thor)
GPU_OF_NODE_NAMES = frozenset({"gpu", "gp10b", "gv11b", "ga10b", "gb10b"})


class FrequencyRange(BaseModel):
    """A devfreq min/max pair in Hz (what `pin` returns and `restore` takes)."""

    model_config = ConfigDict(frozen=True)

    min_freq_hz: int
    max_freq_hz: int


def _mhz(freq_hz: int) -> str:
    return f"{freq_hz / 1e6:g}"


def _of_name(device: Path) -> str | None:
    """A device's devicetree node name: `of_node/name`, or where a container runtime masks
    /sys/firmware (runc does for every unprivileged container: the link's target), the
    `OF_NAME=` line the kernel puts in the device's `uevent`."""
    try:
        return read_text(device / "of_node" / "name")
    except OSError:
        pass
    try:
        for line in read_text(device / "uevent").splitlines():
            if line.startswith("OF_NAME="):
                return line.split("=", 1)[1]
    except OSError:
        pass
    return None


class GpuDevfreq:
    """One GPU devfreq node (e.g. /sys/class/devfreq/57000000.gpu)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.device_path = path / "device"

    @classmethod
    def discover(cls, root: str | os.PathLike[str] | None = None) -> GpuDevfreq:
        """Find the GPU devfreq node under the sysfs root."""
        base = resolve_root(root) / "sys" / "class" / "devfreq"
        seen: list[str] = []
        for node in sorted(base.glob("*")) if base.is_dir() else []:
            name = _of_name(node / "device")
            if name is None:
                continue
            seen.append(f"{node.name}={name}")
            if name in GPU_OF_NODE_NAMES:
                return cls(node)
        hint = (
            "the GPU node appears only after the GPU was powered once: toggle "
            "railgate_enable or run a CUDA program (jetson-facts §4.3); in a container "
            "bind-mount /sys"
        )
        raise DevfreqNotFoundError(
            f"no GPU devfreq node under {base} (of_node names seen: {seen or 'none'}; "
            f"expected one of {sorted(GPU_OF_NODE_NAMES)}); {hint}"
        )

    def _read(self, attr: str) -> int:
        try:
            return read_int(self.path / attr)
        except (OSError, ValueError, IndexError) as exc:
            raise SensorReadError(f"cannot read {self.path / attr}: {exc}") from exc

    def available_frequencies_hz(self) -> list[int]:
        """The frequency table, ascending."""
        try:
            text = read_text(self.path / "available_frequencies")
        except OSError as exc:
            raise SensorReadError(f"cannot read {self.path}/available_frequencies: {exc}") from exc
        return sorted(int(tok) for tok in text.split())

    def cur_freq_hz(self) -> int:
        """Current GPU clock (may be below max_freq when throttled)."""
        return self._read("cur_freq")

    def min_freq_hz(self) -> int:
        """Lower bound the governor may pick."""
        return self._read("min_freq")

    def max_freq_hz(self) -> int:
        """Upper bound the governor may pick."""
        return self._read("max_freq")

    def governor(self) -> str | None:
        """Active devfreq governor (nvhost_podgov by default), if exposed."""
        try:
            # The first word: a shorter name stored over a longer one leaves the old tail
            # behind its newline for an instant on a twin.
            words = read_text(self.path / "governor").split()
            return words[0] if words else None
        except OSError:
            return None

    def load_permille(self) -> int | None:
        """GPU load in per mille from the device's `load` file [R2][R27], if present."""
        try:
            return read_int(self.device_path / "load")
        except (OSError, ValueError, IndexError):
            return None

    def current_range(self) -> FrequencyRange:
        """The min/max currently set."""
        return FrequencyRange(min_freq_hz=self.min_freq_hz(), max_freq_hz=self.max_freq_hz())

    def validate(self, freq_hz: int) -> int:
        """Return `freq_hz` if it is in the table, else raise listing the valid values in MHz."""
        table = self.available_frequencies_hz()
        if freq_hz not in table:
            valid = ", ".join(_mhz(f) for f in table)
            raise UnsupportedFrequencyError(
                f"GPU frequency {_mhz(freq_hz)} MHz ({freq_hz} Hz) is not in the table of "
                f"{self.path}; valid frequencies (MHz): {valid}"
            )
        return freq_hz

    def _write(self, attr: str, freq_hz: int, target: FrequencyRange) -> None:
        path = self.path / attr
        try:
            write_value(path, str(freq_hz))
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                hint = (
                    "a 4.9 kernel rejects min_freq above max_freq and max_freq below min_freq; "
                    "use GpuDevfreq.set_range, which orders the writes"
                )
            elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                hint = ("run as root; a pod needs this devfreq directory mounted read-write "
                        "(hostPath; the chart's agent.boards.<board>.gpuDevfreq), no privileged")
            else:
                hint = "check that the devfreq node still exists"
            raise FrequencyWriteError(
                f"writing {freq_hz} Hz to {path} failed ({exc.strerror or exc}) while setting "
                f"{_mhz(target.min_freq_hz)}-{_mhz(target.max_freq_hz)} MHz; {hint}"
            ) from exc

    def set_range(self, min_freq_hz: int, max_freq_hz: int) -> None:
        """Set min/max in an order valid on 4.9 kernels (and harmless on newer ones).

        Raising past the current max: write max first, then min; otherwise min first, then
        max. Every intermediate state has min <= max, so no store returns EINVAL [R21].
        """
        if min_freq_hz > max_freq_hz:
            raise ValueError(f"min {min_freq_hz} Hz is above max {max_freq_hz} Hz")
        target = FrequencyRange(min_freq_hz=min_freq_hz, max_freq_hz=max_freq_hz)
        if min_freq_hz > self.max_freq_hz():
            self._write("max_freq", max_freq_hz, target)
            self._write("min_freq", min_freq_hz, target)
        else:
            self._write("min_freq", min_freq_hz, target)
            self._write("max_freq", max_freq_hz, target)
        got = self.current_range()
        if got != target:
            raise FrequencyWriteError(
                f"{self.path}: asked for {_mhz(min_freq_hz)}-{_mhz(max_freq_hz)} MHz but the "
                f"node reads {_mhz(got.min_freq_hz)}-{_mhz(got.max_freq_hz)} MHz; another "
                "writer (nvpmodel, jetson_clocks) or a mode cap is in the way"
            )

    def pin(self, freq_hz: int) -> FrequencyRange:
        """Pin the GPU clock (min = max = freq_hz); returns the previous range for `restore`."""
        self.validate(freq_hz)
        previous = self.current_range()
        self.set_range(freq_hz, freq_hz)
        return previous

    def restore(self, previous: FrequencyRange) -> None:
        """Put back a range returned by `pin` (or any valid range)."""
        self.set_range(previous.min_freq_hz, previous.max_freq_hz)

    @contextmanager
    def pinned(self, freq_hz: int) -> Iterator[FrequencyRange]:
        """Context manager: pin on entry, restore the previous range on exit."""
        previous = self.pin(freq_hz)
        try:
            yield previous
        finally:
            self.restore(previous)

    def wait_cur_freq(self, freq_hz: int, timeout_s: float = 2.0, poll_s: float = 0.01) -> bool:
        """Wait until cur_freq reads `freq_hz` (the governor applies writes asynchronously)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.cur_freq_hz() == freq_hz:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)
