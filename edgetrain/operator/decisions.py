"""The operator's own figures of each decision: how long it waited in the queue, how long from
the watch event that woke it to its first decisive write, how many requests it sent one after
another until then, and its CPU time.

A reconcile runs in one thread; `begin` starts its clock there, the API client counts every
request the thread sends (`CountingClient`), and the code that is about to send a decisive write
(the phase, a Job or DaemonSet made or deleted, a budget's echo) calls `decisive`. `end` closes
the clock and, where `EDGETRAIN_OPERATOR_DECISION_LOG` names a file, appends one JSON line per
reconcile (the bench reads it: `edgetrain bench operator`). Reconciles that wrote nothing
decisive are logged too, with `decision_s` null.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edgetrain.kube import KubeClient

_local = threading.local()
_log_lock = threading.Lock()
_log_path: Path | None = None


def set_log(path: Path | None) -> None:
    """Where `end` appends its JSON lines (None: nowhere)."""
    global _log_path
    _log_path = path


@dataclass
class Record:
    """One reconcile's figures (seconds; monotonic clock)."""

    job: str
    cause: str  # what woke it: start, poll, configmap, job, parts, spec, grant, retry
    queue_s: float  # the wake-up's event received → the reconcile started
    decision_s: float | None  # the event received → the first decisive write sent
    serial_requests: int | None  # requests sent one after another up to that write (incl.)
    requests: int  # requests of the whole reconcile (this thread)
    cpu_s: float  # this thread's CPU time over the reconcile
    wall_s: float = 0.0  # the reconcile started → ended
    phase_from: str = ""
    phase_to: str = ""
    at: float = 0.0  # unix seconds at the end
    # time.monotonic() (system-wide on Linux: comparable with another process's on the host)
    # when the event that woke it arrived and when its decisive write was sent
    woke_mono: float = 0.0
    decided_mono: float | None = None


@dataclass
class _Clock:
    job: str
    cause: str
    woke_at: float
    started_at: float
    cpu_at: float
    requests: int = 0
    serial: int | None = None
    decided_at: float | None = None
    armed: bool = False


def begin(job: str, cause: str, woke_at: float | None = None) -> None:
    """Start the clock of a reconcile in this thread; `woke_at`: when the watch event that woke
    it was received (time.monotonic; None: now)."""
    now = time.monotonic()
    _local.clock = _Clock(job, cause, now if woke_at is None else min(woke_at, now), now,
                          time.thread_time())


def _clock() -> _Clock | None:
    return getattr(_local, "clock", None)


def request_sent() -> None:
    """This thread sends a request (called by `CountingClient`)."""
    clock = _clock()
    if clock is None:
        return
    clock.requests += 1
    if clock.armed and clock.serial is None:
        clock.serial, clock.decided_at = clock.requests, time.monotonic()


def decisive() -> None:
    """The next request this thread sends is decisive (the first one counts)."""
    clock = _clock()
    if clock is not None and clock.serial is None:
        clock.armed = True


def decisive_elsewhere() -> None:
    """A decisive write is sent now by other threads in parallel (deletes): one round trip."""
    clock = _clock()
    if clock is not None:
        clock.requests += 1
        if clock.serial is None:
            clock.serial, clock.decided_at = clock.requests, time.monotonic()


def sent_elsewhere() -> None:
    """Requests sent now by other threads in parallel: one round trip in this one's row."""
    clock = _clock()
    if clock is not None:
        clock.requests += 1


def end(phase_from: str = "", phase_to: str = "") -> Record | None:
    """Close this thread's clock; its record (None: no clock was started)."""
    clock = _clock()
    if clock is None:
        return None
    _local.clock = None
    record = Record(
        job=clock.job, cause=clock.cause,
        queue_s=round(clock.started_at - clock.woke_at, 4),
        decision_s=None if clock.decided_at is None else round(clock.decided_at - clock.woke_at,
                                                                4),
        serial_requests=clock.serial, requests=clock.requests,
        cpu_s=round(time.thread_time() - clock.cpu_at, 5),
        wall_s=round(time.monotonic() - clock.started_at, 4),
        phase_from=phase_from, phase_to=phase_to, at=round(time.time(), 3),
        woke_mono=round(clock.woke_at, 4),
        decided_mono=None if clock.decided_at is None else round(clock.decided_at, 4))
    path = _log_path
    if path is not None:
        line = json.dumps(asdict(record), separators=(",", ":"))
        with _log_lock, path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
    return record


def read_log(path: Path) -> list[dict[str, Any]]:
    """The records of a decision log (lines cut by an exit are skipped)."""
    out = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


class CountingClient(KubeClient):
    """The API client of the reconciles: counts each request against the calling thread's
    clock (`request_sent`)."""

    def _call(self, method: str, path: str, query: list[tuple[str, str]], body: Any,
              content_type: str, timeout: float | tuple[float, float],
              retried: bool = False) -> Any:
        if not retried:
            request_sent()
        return super()._call(method, path, query, body, content_type, timeout, retried)
