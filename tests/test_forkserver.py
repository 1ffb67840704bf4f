"""The fork server starts `edgetrain …` containers as Popen would (log, cwd, env, session, the
isolation hook, exit codes, signals), from an interpreter that already holds torch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgetrain.cluster.process import die_with_parent
from tests.forkserver import ForkServer

HEAD = [sys.executable, "-m", "edgetrain"]


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    forks = ForkServer(HEAD)
    yield forks
    forks.close()


def _env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH")},
            **extra}


def _refuse_to_start() -> None:
    raise PermissionError("no such capability here")


def test_only_edgetrain_in_this_interpreter_with_its_startup_settings(server: ForkServer) -> None:
    assert server.runs([*HEAD, "worker"], _env())
    assert not server.runs(["python3", "-c", "pass"], _env())
    assert not server.runs(HEAD, _env())  # no subcommand: nothing to run
    other = os.pathsep.join(filter(None, ["/elsewhere", os.environ.get("PYTHONPATH")]))
    assert not server.runs([*HEAD, "worker"], _env(PYTHONPATH=other))


def test_exit_code_and_output_land_in_the_log_with_the_containers_env(
        server: ForkServer, tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    proc = server.start([*HEAD, "worker", "--inject-failure", "boom", "--", "true"],
                        env=_env(), cwd=tmp_path, log_path=log, preexec=die_with_parent)
    assert proc.wait(timeout=60) == 1 and proc.poll() == 1
    assert "edgetrain worker: injected failure: boom" in log.read_text()
    # A relative output path is the container's working directory; its env reaches the command
    # (EDGETRAIN_DEBUG turns the bad input's one line into a traceback).
    (tmp_path / "work").mkdir()
    proc = server.start([*HEAD, "crds", "-o", "out"], env=_env(), cwd=tmp_path / "work",
                        log_path=log, preexec=None)
    assert proc.wait(timeout=60) == 0, log.read_text()
    assert any("kind: CustomResourceDefinition" in f.read_text()
               for f in (tmp_path / "work" / "out").iterdir())
    debug = tmp_path / "debug.log"
    proc = server.start([*HEAD, "plan", "--profile", "missing.csv"], env=_env(EDGETRAIN_DEBUG="1"),
                        cwd=tmp_path, log_path=debug, preexec=None)
    assert proc.wait(timeout=60) != 0 and "Traceback" in debug.read_text(), debug.read_text()


def test_stderr_apart_from_stdout_where_asked(server: ForkServer, tmp_path: Path) -> None:
    """What `subprocess.run(capture_output=True)` gives a test: the command's JSON on stdout,
    its one-line error on stderr (and nothing else), each in its own file."""
    out, err = tmp_path / "out", tmp_path / "err"
    proc = server.start([*HEAD, "plan", "--profile", "missing.csv"], env=_env(), cwd=tmp_path,
                        log_path=out, preexec=None, stderr_path=err)
    assert proc.wait(timeout=60) == 2
    assert out.read_text() == ""
    # One line: the child's exit frees nothing one at a time, so nothing the server imported
    # (frozen, never collected) is reported as leaked.
    (line,) = err.read_text().splitlines()
    assert line.startswith("error: edgetrain plan:"), line


def test_a_hook_that_fails_is_a_failed_start(server: ForkServer, tmp_path: Path) -> None:
    with pytest.raises(subprocess.SubprocessError, match="no such capability here"):
        server.start([*HEAD, "worker", "--", "true"], env=_env(), cwd=tmp_path,
                     log_path=tmp_path / "c.log", preexec=_refuse_to_start)


def test_a_container_is_a_session_that_holds_torch_and_dies_by_signal(
        server: ForkServer, tmp_path: Path) -> None:
    """`worker` never imports torch, yet its process maps libtorch: a fork of the preloaded
    server. It leads its own session, and a SIGKILL is reported as Popen reports it."""
    held = server.start([*HEAD, "worker", "--", "sleep", "600"], env=_env(), cwd=tmp_path,
                        log_path=tmp_path / "c.log", preexec=die_with_parent)
    assert os.getpgid(held.pid) == held.pid == os.getsid(held.pid)
    assert "libtorch" in Path(f"/proc/{held.pid}/maps").read_text()
    with pytest.raises(subprocess.TimeoutExpired):
        held.wait(timeout=0.2)
    os.killpg(held.pid, signal.SIGKILL)
    assert held.wait(timeout=30) == -signal.SIGKILL and held.poll() == -signal.SIGKILL


def test_the_server_ends_with_its_client(tmp_path: Path) -> None:
    """A client process that dies takes its server and the server's containers with it."""
    code = ("import sys, time\n"
            f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
            "from tests.forkserver import ForkServer\n"
            "from edgetrain.cluster.process import die_with_parent\n"
            f"p = ForkServer({HEAD!r}).start({[*HEAD, 'worker', '--', 'sleep', '600']!r},"
            f" env={_env()!r}, cwd={str(tmp_path)!r}, log_path={str(tmp_path / 'c.log')!r},"
            " preexec=die_with_parent)\n"
            "print(p.pid, flush=True)\n"
            "time.sleep(600)\n")
    client = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert client.stdout is not None
    pid = int(client.stdout.readline())
    os.kill(pid, 0)
    client.kill()
    client.wait()
    deadline = time.monotonic() + 30
    while _alive(pid):
        assert time.monotonic() < deadline, f"container {pid} outlived its server's client"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
