"""One container of a pod on a virtual node: its spec, process, restarts and what it reports
in containerStatuses."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from edgetrain.kube import Obj


class ContainerProcess(Protocol):
    """A container's process: a Popen, or one the fork server started."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


@dataclass
class Container:
    """Runtime state of one container of a pod."""

    spec: Obj
    init: bool
    restart_count: int = 0
    proc: ContainerProcess | None = None
    started_at: str | None = None
    log_path: Path | None = None
    last_terminated: Obj | None = None
    terminated: Obj | None = None  # final state when it will not run again
    next_start_s: float = 0.0  # monotonic time of the next (re)start
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    probe_ready: bool = True  # readinessProbe passed (True when there is none)
    next_probe_s: float = 0.0

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self, image_id: str = "") -> Obj:
        """containerStatuses[] entry."""
        state: Obj
        if self.proc is not None and self.proc.poll() is None:
            state = {"running": {"startedAt": self.started_at}}
        elif self.terminated is not None:
            state = {"terminated": self.terminated}
        else:
            waiting: Obj = {"reason": self.waiting_reason}
            if self.waiting_message:
                waiting["message"] = self.waiting_message
            state = {"waiting": waiting}
        running = "running" in state
        # Strategic merge would merge the old and new state maps; replace them instead.
        state["$patch"] = "replace"
        out: Obj = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": image_id,
            "ready": running and not self.init and self.probe_ready,
            "started": running,
            "restartCount": self.restart_count,
            "state": state,
            "lastState": ({"terminated": self.last_terminated, "$patch": "replace"}
                          if self.last_terminated else {}),
        }
        if self.proc is not None:
            out["containerID"] = f"vnode://{self.proc.pid}"
        return out
