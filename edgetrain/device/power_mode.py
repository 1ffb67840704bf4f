"""Full power modes through sysfs: online CPU cores, CPU clock cap and EMC clock.

The paths are the Jetson ones the twin also watches (jetson-facts.md §1), so profiling a power
mode runs the same code on a board and on a twin.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from edgetrain.api.errors import BadInputError
from edgetrain.device.sim import BOARDS, read_state

CPU_DIR = "sys/devices/system/cpu"


class PowerModeWriter:
    """Sets online cores, CPU clock cap and EMC clock under a sysfs root; restores on exit.

    The paths are the Jetson ones the twin also watches (jetson-facts.md §1); on a real board
    this needs root, and nvpmodel must not be changing modes at the same time.
    """

    def __init__(self, root: Path, board: str, saved: Mapping[str, str] | None = None) -> None:
        """`saved`: originals recorded earlier (`saved_files()`), e.g. by an agent before a
        restart, so `restore()` puts back what was there before the first change."""
        self.root = root
        self.spec = BOARDS[board]
        emc = root / self.spec.emc_debugfs_dir
        self.emc_rate = emc / ("rate" if "bpmp" in self.spec.emc_debugfs_dir else "clk_rate")
        self._saved: dict[Path, str] = {root / k: v for k, v in (saved or {}).items()}

    def paths(self) -> list[Path]:
        """Every file `apply` writes, in the order it writes them."""
        cpu = self.root / CPU_DIR
        return [
            *(cpu / f"cpu{i}/cpufreq/scaling_max_freq" for i in range(self.spec.cpu_cores)),
            *(cpu / f"cpu{i}/online" for i in range(1, self.spec.cpu_cores)),
            self.emc_rate,
        ]

    def snapshot(self) -> dict[str, str]:
        """Record the originals of every file `apply` writes (kept if recorded before); returns
        them by path relative to the root, for persisting before anything changes."""
        for path in self.paths():
            if path not in self._saved:
                self._saved[path] = path.read_text() if path.exists() else ""
        return self.saved_files()

    def saved_files(self) -> dict[str, str]:
        """The recorded originals, by path relative to the root."""
        return {str(p.relative_to(self.root)): v for p, v in self._saved.items()}

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

    def read(self) -> tuple[int, int, int] | None:
        """(online cores, CPU clock cap Hz, EMC Hz) as the files say now; None if unreadable."""
        cpu = self.root / CPU_DIR
        try:
            online = [(cpu / f"cpu{i}/online").read_text().strip() == "1"
                      for i in range(1, self.spec.cpu_cores)]
            cap_khz = int((cpu / "cpu0/cpufreq/scaling_max_freq").read_text().strip())
            emc_hz = int(self.emc_rate.read_text().strip())
        except (OSError, ValueError):
            return None
        return (1 + sum(online), cap_khz * 1000, emc_hz)

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
