"""The agent's persisted pin: what range to restore, and what the guard has decided, so a
restart neither leaks a pin (pod gone while the agent was down) nor forgets one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pydantic import BaseModel, ValidationError


class PinState(BaseModel):
    """Written atomically after every change to the applied range."""

    version: int = 1
    node: str = ""
    # The devfreq range before the agent first changed it; None when nothing is applied.
    saved_min_hz: int | None = None
    saved_max_hz: int | None = None
    # What is applied now and why.
    applied_min_hz: int | None = None
    applied_max_hz: int | None = None
    owner: str | None = None  # namespace/name of the pinned pod
    owner_uid: str | None = None
    # Power guard: the cap it reached for the current (frequency, limit) request.
    guard_cap_hz: int | None = None
    guard_signature: list[float | None] | None = None
    guard_steps: int = 0
    # Full power mode (CPU cores and clock cap, EMC clock): the files' originals, by path under
    # the sysfs root, recorded before the first write; None when no mode is applied.
    saved_mode_files: dict[str, str] | None = None
    applied_mode: list[int] | None = None  # [cpu_cores, cpu_freq_hz, emc_freq_hz]
    mode_owner: str | None = None

    @property
    def holding(self) -> bool:
        """True while a saved range waits to be restored."""
        return self.saved_min_hz is not None and self.saved_max_hz is not None


def load_state(path: Path) -> PinState:
    """The state file, or an empty state if it is missing; a corrupt file is an error."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return PinState()
    try:
        return PinState.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        raise ValueError(f"node-agent state file {path} is unreadable ({exc}); it records the "
                         "GPU range to restore: fix or remove it by hand") from exc


def save_state(path: Path, state: PinState) -> None:
    """Write via a temp file + fsync + rename, so a crash leaves the old or the new state."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(state.model_dump_json(indent=1))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
