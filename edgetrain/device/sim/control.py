"""The twin's control files: what workload is running, and what the twin last computed.

`<root>/run/edgetrain-twin/workload.json` is written by whoever drives the twin (a trainer or
profiler, in this process or another); the twin re-reads it every tick. `state.json` is the
twin's own report of its current (simulated) state.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

TWIN_DIR = "run/edgetrain-twin"
WORKLOAD_FILE = f"{TWIN_DIR}/workload.json"
STATE_FILE = f"{TWIN_DIR}/state.json"


class TwinWorkload(BaseModel):
    """The training job the twin simulates; `busy=False` means the board idles."""

    model_config = ConfigDict(frozen=True)

    model: str = "resnet18"
    input_shape: tuple[int, ...] = (3, 32, 32)
    num_classes: int = 10
    batch_size: int = 64
    busy: bool = False


class TwinState(BaseModel):
    """What the twin computed on its last tick (every number is simulated)."""

    board: str
    timestamp_s: float
    gpu_freq_hz: int
    phase: Literal["idle", "gpu-busy", "gap"]
    total_power_w: float
    gpu_temp_c: float
    throttle_steps: int
    workload: TwinWorkload
    cpu_cores: int
    cpu_freq_hz: int
    emc_freq_hz: int
    simulated: Literal[True] = True


def atomic_write(path: Path, text: str) -> None:
    """Write via a temp file in the same directory and os.replace, so readers never see half.
    The file keeps its mode, as a sysfs file's never changes (a new one gets 0644)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, kept_mode(path))
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def kept_mode(path: Path, default: int = 0o644) -> int:
    """The permission bits a replacement of `path` keeps (`default` for a new file)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return default


def write_workload(root: str | os.PathLike[str], workload: TwinWorkload) -> None:
    """Tell a twin (in any process) which workload runs; creates the control dir if needed."""
    path = Path(root) / WORKLOAD_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(workload.model_dump(mode="json")))


def read_workload(root: str | os.PathLike[str]) -> TwinWorkload | None:
    """The current workload, or None if the file is missing or unreadable."""
    try:
        return TwinWorkload.model_validate_json((Path(root) / WORKLOAD_FILE).read_text())
    except (OSError, ValidationError, ValueError):
        return None


def read_state(root: str | os.PathLike[str]) -> TwinState | None:
    """The twin's last reported state, or None before its first tick."""
    try:
        return TwinState.model_validate_json((Path(root) / STATE_FILE).read_text())
    except (OSError, ValidationError, ValueError):
        return None
