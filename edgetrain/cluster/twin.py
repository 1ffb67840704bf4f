"""A live device twin's sysfs tree for a board (`twinhost` runs the real Jetson nodes' twins;
tests run twins of their own)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Protocol

from edgetrain.device.sim import DeviceTwin
from edgetrain.workloads import workload_cost

# The twin polls its files for frequency writes from pod processes and rewrites the power
# files every tick; 10 Hz keeps several twins cheap on a 2-core machine.
TWIN_TICK_S = 0.1


class Twin(Protocol):
    """A running device twin: `root` is what EDGETRAIN_SYSFS_ROOT points at."""

    @property
    def root(self) -> Path:
        """The fake filesystem root (holds sys/, etc/ as on the board)."""
        ...

    def close(self) -> None:
        """Stop animating the tree (the files stay)."""
        ...


class SimTwin:
    """edgetrain.device.sim.DeviceTwin running in this process."""

    def __init__(self, board: str, directory: Path, tick_s: float = TWIN_TICK_S) -> None:
        self.device = DeviceTwin(board, directory, tick_s=tick_s, cost_of=workload_cost).start()

    @property
    def root(self) -> Path:
        """The twin's filesystem root."""
        return self.device.root

    def close(self) -> None:
        """Stop the twin's update thread."""
        self.device.stop()


def share_with_group(root: Path, gid: int) -> None:
    """Give a twin's tree to the group of a Jetson's GPU device nodes, as L4T gives its device
    files to `video`: group-writable files, setgid directories (what the twin creates later
    inherits the group; a replaced file keeps its mode). A non-root pod in the group (the
    worker pods' supplementalGroups) drives the twin; any other non-root UID only reads it.
    Only root can hand files to a group: elsewhere the tree stays as it is."""
    if os.geteuid() != 0:
        return
    for top, _dirs, files in os.walk(root):
        _share(top, gid, stat.S_ISGID | 0o070)
        for name in files:
            _share(os.path.join(top, name), gid, 0o060)


def _share(path: str, gid: int, bits: int) -> None:
    # The running twin replaces its files meanwhile: a temporary file may be gone already.
    with contextlib.suppress(FileNotFoundError):
        if not os.path.islink(path):
            os.chown(path, -1, gid)
            os.chmod(path, stat.S_IMODE(os.stat(path).st_mode) | bits)
