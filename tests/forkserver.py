"""The tests' `edgetrain …` commands forked from a preloaded interpreter (`run_edgetrain` in
tests/helpers.py): a server that imported torch and edgetrain's commands once forks each
command, which then runs without the ~6 s of imports a new interpreter pays (torch 3.6 s,
torch._dynamo 2.5 s, the CLI). A test harness: pods on the real nodes start their images'
own interpreters.

The child does what `subprocess.Popen` does before exec (stdio, cwd, session, the isolation
hook), then what `python -m edgetrain ARGS` does (runpy). Other commands start as processes.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from edgetrain.operator.worker import exit_as_interpreter, run_module_here

# What every workload pod imports; a module missing here is imported by the child (slower).
PRELOAD = ("torch", "torch._dynamo", "torch.optim", "edgetrain.cli.operator",
           "edgetrain.cli.workloads", "edgetrain.cli.node_agent", "edgetrain.operator.worker",
           "edgetrain.workloads.training")
# Read by the interpreter as it starts, so a fork cannot take a container's own values.
INTERPRETER_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONHASHSEED", "PYTHONOPTIMIZE", "PYTHONSAFEPATH",
                   "PYTHONWARNINGS", "PYTHONDEVMODE", "PYTHONNOUSERSITE", "PYTHONUSERBASE")
_HEADER = struct.Struct("!I")
START_FAILED = "start-failed"
STARTUP_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Launch:
    """One container to start: what Popen would be given."""

    module: str  # python -m MODULE
    args: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    log_path: str
    preexec: Callable[[], None] | None
    stderr_path: str | None = None  # None: stderr goes to log_path with stdout


def _send(conn: socket.socket, payload: bytes) -> None:
    conn.sendall(_HEADER.pack(len(payload)) + payload)


def _recv(conn: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise EOFError("fork server connection closed")
            data += chunk
        return data

    (size,) = _HEADER.unpack(exactly(_HEADER.size))
    return exactly(size)


class ForkedProcess:
    """A container the server forked: the part of Popen's interface the runtime uses."""

    def __init__(self, pid: int, conn: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn  # the server writes the exit code here, then closes it
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        return self._collect(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
        return code

    def _collect(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            if not select.select([self._conn], [], [], timeout)[0]:
                return None
            try:
                self.returncode = int(_recv(self._conn).decode())
            except (EOFError, OSError, ValueError):
                self.returncode = -signal.SIGKILL  # the server died: so did its children
            self._conn.close()
            return self.returncode


class ForkServer:
    """The client: starts the server on first use and asks it for containers."""

    def __init__(self, head: Sequence[str]) -> None:
        if len(head) != 3 or head[0] != sys.executable or head[1] != "-m":
            raise ValueError(f"a fork server runs `{sys.executable} -m MODULE`, not {head}")
        self.head = list(head)  # the argv prefix the server runs in place of exec
        # An abstract socket (Linux): no file to leave behind, gone with the server.
        self._name = f"edgetrain-forkserver-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._address = "\0" + self._name
        self._server: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def runs(self, argv: Sequence[str], env: Mapping[str, str]) -> bool:
        """True for `edgetrain …` in this interpreter (the head `default_executables` maps),
        with the startup settings the server was started with (PYTHONPATH and the like)."""
        return (len(argv) > len(self.head) and list(argv[: len(self.head)]) == self.head
                and all(env.get(k) == os.environ.get(k) for k in INTERPRETER_ENV))

    def start(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path,
              log_path: Path, preexec: Callable[[], None] | None,
              stderr_path: Path | None = None) -> ForkedProcess:
        """Fork `argv` as Popen would start it, its output appended to `log_path` (stderr to
        `stderr_path` where given); raises SubprocessError if its setup failed."""
        self._ensure_server()
        launch = Launch(self.head[-1], tuple(argv[len(self.head):]), dict(env), str(cwd),
                        str(log_path), preexec,
                        None if stderr_path is None else str(stderr_path))
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self._address)
        _send(conn, pickle.dumps(launch))
        reply = _recv(conn).decode()
        kind, _, detail = reply.partition(" ")
        if kind == START_FAILED:
            conn.close()
            raise subprocess.SubprocessError(detail)
        return ForkedProcess(int(kind), conn)

    def _ensure_server(self) -> None:
        with self._lock:
            if self._server is not None and self._server.poll() is None:
                return
            # Its stdin is a pipe only this process holds: EOF there (this process gone) ends it.
            self._server = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), self._name],
                stdin=subprocess.PIPE, start_new_session=True)
            assert self._server.stdout is None and self._server.stdin is not None
            # The server binds before it imports: a connect waits in its backlog meanwhile.
            line = b""
            for _ in range(600):
                probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                probe.settimeout(STARTUP_TIMEOUT_S)  # the server imports torch first
                try:
                    probe.connect(self._address)
                    _send(probe, b"")  # an empty request: a readiness probe
                    line = _recv(probe)
                    break
                except (ConnectionRefusedError, FileNotFoundError):
                    if self._server.poll() is not None:
                        raise subprocess.SubprocessError(
                            "the fork server exited at start") from None
                    threading.Event().wait(0.05)
                finally:
                    probe.close()
            if line != b"ready":
                raise subprocess.SubprocessError("the fork server did not start")

    def close(self) -> None:
        """Stop the server (its containers were stopped by the runtime)."""
        with self._lock:
            if self._server is not None and self._server.poll() is None:
                assert self._server.stdin is not None
                self._server.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._server.wait(timeout=5)
                if self._server.poll() is None:
                    self._server.kill()
                    self._server.wait()


_SHARED: dict[tuple[str, ...], ForkServer] = {}
_SHARED_LOCK = threading.Lock()


def shared_fork_server(head: Sequence[str]) -> ForkServer:
    """One server per process and head: every virtual node agent here uses it (it stops when
    this process ends)."""
    with _SHARED_LOCK:
        return _SHARED.setdefault(tuple(head), ForkServer(head))


# --- the server (python tests/forkserver.py ADDRESS) ---


def serve(name: str) -> None:
    """Import PRELOAD, then fork a child per request until stdin closes."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(128)
    for module in PRELOAD:
        importlib.import_module(module)
    # What the imports made lives as long as every child: frozen, the children's collections
    # skip it. Else each child's first full collection and its exit walk torch's whole heap,
    # 1.1 s of CPU and a copy of every page it touches (gc.freeze's documented use with fork).
    gc.collect()
    gc.freeze()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    while True:
        ready = select.select([listener.fileno(), wake_r, 0], [], [])[0]
        if 0 in ready and not os.read(0, 1):
            return  # the client is gone; our children get their PDEATHSIG
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
        if listener.fileno() in ready:
            conn, _ = listener.accept()
            with contextlib.suppress(OSError, EOFError):
                _answer(conn, children, [listener.fileno(), wake_r, wake_w])
        _reap(children)


def _answer(conn: socket.socket, children: dict[int, socket.socket],
            server_fds: list[int]) -> None:
    request = _recv(conn)
    if not request:
        _send(conn, b"ready")
        conn.close()
        return
    launch: Launch = pickle.loads(request)  # from our own client, over a private socket
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(err_r)
        exit_as_interpreter(_child(launch, err_w, [*server_fds, conn.fileno(),
                                                   *(c.fileno() for c in children.values())]))
    os.close(err_w)
    with os.fdopen(err_r, "rb") as errors:
        failure = errors.read().decode(errors="replace")  # EOF: the child is running
    if failure:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        _send(conn, f"{START_FAILED} {failure}".encode())
        conn.close()
        return
    _send(conn, str(pid).encode())
    children[pid] = conn


def _reap(children: dict[int, socket.socket]) -> None:
    # Every exited child, tracked or not: one whose pid never reached its client (the reply
    # failed) is still this process's to reap.
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                _send(conn, str(os.waitstatus_to_exitcode(status)).encode())
            conn.close()


def _child(launch: Launch, err_w: int, inherited: list[int]) -> int:
    """In the fork: Popen's child steps, then the command; returns its exit code."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in inherited:
            with contextlib.suppress(OSError):
                os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        out = os.open(launch.log_path, flags, 0o644)
        err = out if launch.stderr_path is None else os.open(launch.stderr_path, flags, 0o644)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in {null, out, err}:
            os.close(fd)
        os.chdir(launch.cwd)
        os.setsid()
        if launch.preexec is not None:
            launch.preexec()
        os.environ.clear()
        os.environ.update(launch.env)
    except BaseException as exc:  # what Popen reports as a failed start
        os.write(err_w, f"{type(exc).__name__}: {exc}".encode())
        os._exit(127)
    os.close(err_w)  # the server's read ends: started
    sys.dont_write_bytecode = bool(launch.env.get("PYTHONDONTWRITEBYTECODE"))
    _fresh_stdio(unbuffered=bool(launch.env.get("PYTHONUNBUFFERED")))
    return run_module_here(launch.module, launch.args)


def _fresh_stdio(unbuffered: bool) -> None:
    """stdout and stderr as a new interpreter makes them for the log file (PYTHONUNBUFFERED:
    written through; else stdout buffered, stderr by line)."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw),
                                  encoding=old.encoding, errors=old.errors,
                                  line_buffering=fd == 2 and not unbuffered,
                                  write_through=unbuffered)
        setattr(sys, name, stream)


if __name__ == "__main__":
    # The client pickles `tests.forkserver.Launch`: the package it names must import here as
    # it does under pytest, which puts the checkout's root on sys.path (run as a script, only
    # tests/ is there; PYTHONPATH is no help, the containers would inherit it).
    sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
    serve(sys.argv[1])
    # Its children have ended with it: nothing to free one object at a time, and a teardown
    # would report the frozen imports' extension objects as leaked.
    os._exit(0)
