"""Supervised local processes: own process group, log file, readiness waits, clean stop."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

LOG_TAIL_LINES = 40


class ComponentError(RuntimeError):
    """A component failed to start or died; the message names it and carries its log tail."""

    def __init__(self, component: str, problem: str, log_path: Path | None = None) -> None:
        tail = log_tail(log_path) if log_path is not None else ""
        where = f" (log: {log_path})" if log_path is not None else ""
        text = f"{component}: {problem}{where}"
        if tail:
            text += f"\n--- last lines of {component} log ---\n{tail}"
        super().__init__(text)
        self.component = component
        self.log_path = log_path


def log_tail(path: Path | None, lines: int = LOG_TAIL_LINES, max_bytes: int = 64_000) -> str:
    """Last `lines` lines of a log file ('' if it does not exist)."""
    if path is None or not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size_bytes = f.tell()
        f.seek(max(0, size_bytes - max_bytes))
        data = f.read().decode("utf-8", errors="replace")
    return "\n".join(data.splitlines()[-lines:])


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child before exec: get SIGTERM when the parent dies, even by SIGKILL, so a killed
    test run or agent leaves no etcd, apiserver or pod process behind (Linux only)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def pid_alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # Field 3 (after the parenthesised command) is the state; Z means zombie.
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def pid_cmdline(pid: int) -> list[str]:
    """argv of a running process ([] if gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def rss_bytes(pid: int) -> int:
    """Resident set size of one process in bytes (0 if gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def kill_group(pid: int, grace_s: float, sig: int = signal.SIGTERM) -> None:
    """Signal the process group led by `pid`, wait up to `grace_s`, then SIGKILL the group."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            break
        time.sleep(0.05)
    # Kill the whole group even if the leader is gone: children (helpers, shells) may linger.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


_LIVE: set[ManagedProcess] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_all_at_exit() -> None:
    """Never leak etcd/apiserver/pods: stop every attached process this interpreter started."""
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        proc.stop(grace_s=2.0)


class ManagedProcess:
    """One child process in its own process group, logging to a file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        detached: bool = False,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        # Detached processes outlive this interpreter (edgetrain cluster up); no atexit stop.
        self.detached = detached
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        """Process id (also the process-group id)."""
        if self._popen is None:
            raise ComponentError(self.name, "not started")
        return self._popen.pid

    def start(self) -> ManagedProcess:
        """Spawn the process; output (stdout+stderr) appends to the log file."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"--- {time.strftime('%H:%M:%S')} start: {' '.join(self.argv)}\n".encode())
            log.flush()
            try:
                self._popen = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    cwd=self.cwd,
                    start_new_session=True,
                    # Detached processes must outlive us; attached ones never should.
                    preexec_fn=None if self.detached else die_with_parent,
                )
            except OSError as exc:
                raise ComponentError(self.name, f"cannot execute {self.argv[0]}: {exc}") from exc
        if not self.detached:
            with _LIVE_LOCK:
                _LIVE.add(self)
        return self

    def returncode(self) -> int | None:
        """Exit code, or None while running."""
        return None if self._popen is None else self._popen.poll()

    def alive(self) -> bool:
        """True while the process runs."""
        return self._popen is not None and self._popen.poll() is None

    def check(self) -> None:
        """Raise ComponentError with the log tail if the process has exited."""
        code = self.returncode()
        if code is not None:
            raise ComponentError(self.name, f"exited with code {code}", self.log_path)

    def wait_ready(
        self, probe: Callable[[], bool], timeout_s: float, what: str = "ready"
    ) -> None:
        """Poll `probe` until it returns True; fail fast if the process dies."""
        deadline = time.monotonic() + timeout_s
        delay_s = 0.05
        while True:
            self.check()
            try:
                if probe():
                    return
            except Exception:  # probes poll servers that are still coming up
                pass
            if time.monotonic() > deadline:
                raise ComponentError(
                    self.name, f"not {what} after {timeout_s:.0f} s", self.log_path
                )
            time.sleep(delay_s)
            delay_s = min(delay_s * 1.5, 0.5)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the group, SIGKILL after `grace_s`; idempotent."""
        popen = self._popen
        if popen is not None:
            if popen.poll() is None:
                kill_group(popen.pid, grace_s)
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=5)
        with _LIVE_LOCK:
            _LIVE.discard(self)
