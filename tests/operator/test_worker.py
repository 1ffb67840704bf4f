"""`edgetrain worker`: runs the workload, publishes files and progress, keeps exit codes."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from edgetrain.api.keys import ANNOTATION_GPU_FREQUENCY_HZ, POWER_MODE_ANNOTATIONS
from edgetrain.cluster import KubeClient, api_path
from edgetrain.device import DeviceError
from edgetrain.kube import KubeApiError
from edgetrain.operator.worker import (
    PROGRESS_KEY,
    RESULT_KEY,
    add_to_configmap,
    agent_clock_request,
    agent_mode_request,
    carry_weights,
    run_worker,
)
from edgetrain.operator.worker_security import restrict


class FakeKube:
    """Records patches and creates; ConfigMaps exist once created (or listed in `existing`)."""

    def __init__(self, existing: set[str] | None = None) -> None:
        self.existing = set(existing or ())
        self.calls: list[tuple[str, str, Any]] = []
        self.asked = threading.Event()  # someone polled with get_or_none

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        self.asked.set()
        return {} if path.rsplit("/", 1)[-1] in self.existing else None

    def patch(self, path: str, body: Any, patch_type: str = "merge") -> dict[str, Any]:
        self.calls.append(("patch", path, body))
        if path.rsplit("/", 1)[-1] not in self.existing:
            raise KubeApiError("PATCH", path, 404, "NotFound", "")
        return {}

    def create(self, path: str, body: Any) -> dict[str, Any]:
        self.calls.append(("create", path, body))
        self.existing.add(body["metadata"]["name"])
        return {}


def _child(lines: list[dict[str, Any]], code: int = 0, write: Path | None = None) -> list[str]:
    script = "import json,sys\n"
    for line in lines:
        script += f"print(json.dumps({line!r}), flush=True)\n"
    if write is not None:
        script += f"open({str(write)!r}, 'w').write('{{}}')\n"
    script += f"sys.exit({code})\n"
    return [sys.executable, "-c", script]


def test_publishes_files_on_success(tmp_path: Path) -> None:
    kube = FakeKube()
    out = tmp_path / "eff.json"
    code = run_worker(_child([], 0, out), namespace="ns", publish="cm1", files={"e.json": out},
                      labels={"a": "b"}, client=kube)  # type: ignore[arg-type]
    assert code == 0
    created = [c for c in kube.calls if c[0] == "create"]
    assert created[0][2]["data"] == {"e.json": "{}"}
    assert created[0][2]["metadata"]["labels"] == {"a": "b"}
    assert created[0][1] == "/api/v1/namespaces/ns/configmaps"


def test_failure_keeps_the_exit_code_and_publishes_nothing(tmp_path: Path) -> None:
    kube = FakeKube()
    code = run_worker(_child([], 4), namespace="ns", publish="cm1",
                      files={"x": tmp_path / "x"}, client=kube)  # type: ignore[arg-type]
    assert code == 4 and kube.calls == []
    assert run_worker(["true"], namespace="ns", inject_failure="planned") == 1


def test_progress_lines_reach_the_configmap() -> None:
    kube = FakeKube({"prog"})
    lines = [{"event": "start"}, {"event": "progress", "samples": 10, "accuracy": 0.1},
             {"event": "progress", "samples": 20, "accuracy": 0.2},
             {"event": "result", "samples": 30, "accuracy": 0.9, "reached_target": True}]
    code = run_worker(_child(lines), namespace="ns", progress="prog", progress_interval_s=60,
                      client=kube)  # type: ignore[arg-type]
    assert code == 0
    sent = [c[2]["data"] for c in kube.calls]
    assert json.loads(sent[0][PROGRESS_KEY])["samples"] == 10  # first one goes at once
    assert json.loads(sent[-1][RESULT_KEY])["reached_target"] is True


def test_carry_weights(tmp_path: Path) -> None:
    src, dst = tmp_path / "run1", tmp_path / "run2" / "carried.pt"
    assert not carry_weights(src, dst)
    src.mkdir()
    torch.save({"model": {"w": torch.ones(2)}, "state": {}}, src / "checkpoint.pt")
    assert carry_weights(src, dst)
    assert torch.equal(torch.load(dst, weights_only=True)["w"], torch.ones(2))
    (src / "checkpoint.pt").unlink()
    assert carry_weights(src, dst)  # made once, kept


@pytest.mark.parametrize("cmd", [[]])
def test_no_command(cmd: list[str]) -> None:
    assert run_worker(cmd, namespace="ns") == 2


def test_pretrain_recipe_with_compute_choice_makes_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGETRAIN_CACHE_DIR", str(tmp_path / "cache"))
    seen = tmp_path / "argv.txt"
    recipe = {"model": "resnet8-w025", "dataset": "digits", "samples": 64,
              "device": "cpu", "precision": "bf16"}
    code = run_worker(
        [sys.executable, "-c", f"import sys; open({str(seen)!r}, 'w').write(sys.argv[-1])"],
        namespace="ns",
        pretrain=recipe,
    )
    assert code == 0
    weights = Path(seen.read_text())
    assert weights.is_file() and weights.parent == tmp_path / "cache" / "weights"


def test_bad_input_line_becomes_the_termination_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The workload's last stderr line (its one-line error), not a log tail, ends the pod."""
    log = tmp_path / "termination-log"
    monkeypatch.setenv("EDGETRAIN_TERMINATION_LOG", str(log))
    script = (
        "import sys\nprint('progress', flush=True)\n"
        "print('warning: something', file=sys.stderr)\n"
        "print('error: job.yaml, field \\'spec.dataset.name\\': unknown data set',\n"
        "      file=sys.stderr)\n"
        "sys.exit(2)\n"
    )
    assert run_worker([sys.executable, "-c", script], namespace="ns") == 2
    assert log.read_text() == "error: job.yaml, field 'spec.dataset.name': unknown data set"
    err = capfd.readouterr().err
    assert "warning: something" in err and "exited with 2" in err  # still in the log
    log.unlink()
    assert run_worker(_child([], 0), namespace="ns") == 0
    assert not log.exists()  # success writes no termination message


PROGRESS_THEN_STAMP = (
    "import json, sys, time\n"
    "print(json.dumps({'event': 'progress', 'samples': 256}), flush=True)\n"
    "time.sleep(0.5)\n"
    "print(json.dumps({'event': 'after', 'time': time.time()}), flush=True)\n"
)


def test_hold_pauses_the_workload_at_its_first_progress_line_until_released(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Fault injection: the workload stops after its first progress line (published at once)
    and runs on only once the release ConfigMap exists."""
    kube = FakeKube({"prog"})
    released: dict[str, Any] = {}

    def release() -> None:
        kube.asked.wait(30)
        time.sleep(2.0)
        released["sent_before"] = [c[2]["data"] for c in kube.calls]
        released["at"] = time.time()
        kube.existing.add("rel")

    threading.Thread(target=release, daemon=True).start()
    code = run_worker([sys.executable, "-c", PROGRESS_THEN_STAMP], namespace="ns",
                      progress="prog", progress_interval_s=60, hold_at_progress="rel",
                      client=kube)  # type: ignore[arg-type]
    assert code == 0
    out, err = capfd.readouterr()
    after = next(json.loads(line) for line in out.splitlines() if '"after"' in line)
    # The child slept 0.5 s after its progress line: it ran on only after the release.
    assert after["time"] >= released["at"], (after, released)
    assert json.loads(released["sent_before"][0][PROGRESS_KEY])["samples"] == 256
    assert "holding the workload until configmap rel" in err and "released" in err


def test_sigterm_ends_a_held_workload() -> None:
    """A held workload still gets SIGTERM (its pod deleted): continued, then signalled."""
    kube = FakeKube()  # never released
    script = (
        "import json, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))\n"
        "print(json.dumps({'event': 'progress', 'samples': 1}), flush=True)\n"
        "time.sleep(60)\n"
    )
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    def terminate() -> None:
        if kube.asked.wait(30):  # the worker holds (its handler is in place)
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate, daemon=True).start()
    started = time.monotonic()
    try:
        code = run_worker([sys.executable, "-c", script], namespace="ns",
                          hold_at_progress="rel", client=kube)  # type: ignore[arg-type]
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert code == 3 and time.monotonic() - started < 30


def test_a_release_nobody_can_read_does_not_hold(capfd: pytest.CaptureFixture[str]) -> None:
    class Forbidden(FakeKube):
        def get_or_none(self, path: str) -> dict[str, Any] | None:
            raise KubeApiError("GET", path, 403, "Forbidden", "")

    code = run_worker([sys.executable, "-c", PROGRESS_THEN_STAMP], namespace="ns",
                      hold_at_progress="rel", client=Forbidden())  # type: ignore[arg-type]
    assert code == 0 and "cannot be read" in capfd.readouterr().err


@pytest.mark.cluster
def test_a_cache_entry_keeps_its_first_value_while_new_keys_are_added(
    kube: KubeClient, namespace: str
) -> None:
    """Two jobs that profiled one key at once: the second publish adds nothing, so a reader
    that memoised the entry never holds a stale copy; new keys (estimate parts) still land."""
    path = api_path("v1", "configmaps", namespace, "edgetrain-profile-k")
    first = {"profile.csv": "first", "profile.meta.json": "{}"}
    assert add_to_configmap(kube, namespace, "edgetrain-profile-k", first,
                            {"edgetrain.io/kind": "profile"}) == sorted(first)
    version = kube.get(path)["metadata"]["resourceVersion"]
    second = {"profile.csv": "second", "profile.meta.json": "{\"x\": 1}"}
    assert add_to_configmap(kube, namespace, "edgetrain-profile-k", second,
                            {"edgetrain.io/kind": "profile"}) == []
    got = kube.get(path)
    assert got["data"] == first
    assert got["metadata"]["resourceVersion"] == version  # not even written
    assert add_to_configmap(kube, namespace, "edgetrain-profile-k",
                            {"part-1.json": "p1", "profile.csv": "third"}) == ["part-1.json"]
    assert kube.get(path)["data"] == {**first, "part-1.json": "p1"}


@pytest.mark.cluster
def test_racing_writers_each_add_their_keys_once(kube: KubeClient, namespace: str) -> None:
    """Eight writers at once (an Indexed estimate's pods): every part lands, none is lost to a
    concurrent merge, and the shared key keeps exactly one writer's value."""
    name = "edgetrain-parts-race"
    added: dict[int, list[str]] = {}

    def write(i: int) -> None:
        added[i] = add_to_configmap(kube, namespace, name,
                                    {f"part-{i}.json": str(i), "shared": str(i)})

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    data = kube.get(api_path("v1", "configmaps", namespace, name))["data"]
    assert {k for k in data if k.startswith("part-")} == {f"part-{i}.json" for i in range(8)}
    winners = [i for i, keys in added.items() if "shared" in keys]
    assert len(winners) == 1 and data["shared"] == str(winners[0]), (winners, data)


@pytest.mark.cluster
def test_clock_requests_annotate_the_pod_itself(kube: KubeClient, namespace: str) -> None:
    """--clock-by-agent: a request is the node agent's GPU annotation on the asking pod; the
    release removes it (the agent then restores the range)."""
    kube.create(api_path("v1", "pods", namespace), {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "profiler"},
        "spec": restrict({"schedulingGates": [{"name": "edgetrain.io/test"}],
                          "containers": [{"name": "profile", "image": "profile:never"}]})})
    request = agent_clock_request(kube, namespace, "profiler")
    path = api_path("v1", "pods", namespace, "profiler")
    request(614_400_000)
    assert kube.get(path)["metadata"]["annotations"][ANNOTATION_GPU_FREQUENCY_HZ] == "614400000"
    request(None)
    assert ANNOTATION_GPU_FREQUENCY_HZ not in (kube.get(path)["metadata"].get("annotations")
                                               or {})
    # A power mode (predicted profiling) is the agent's three mode annotations, all or none.
    modes = agent_mode_request(kube, namespace, "profiler")
    modes((4, 1_479_000_000, 1_600_000_000))
    ann = kube.get(path)["metadata"]["annotations"]
    assert [ann[k] for k in POWER_MODE_ANNOTATIONS] == ["4", "1479000000", "1600000000"]
    modes(None)
    assert not set(POWER_MODE_ANNOTATIONS) & set(kube.get(path)["metadata"].get("annotations")
                                                  or {})
    # A request that cannot be made says what the pod needs (the profile exits 2 with it).
    with pytest.raises(DeviceError, match=r"on pod .*/gone: .*404.*needs patch on pods"):
        agent_clock_request(kube, namespace, "gone")(307_200_000)
    with pytest.raises(DeviceError, match=r"power mode .* on pod .*/gone: .*404"):
        agent_mode_request(kube, namespace, "gone")((2, 921_600_000, 1_600_000_000))


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_an_edgetrain_workload_runs_in_a_fork_of_the_worker(tmp_path: Path) -> None:
    """Run as a pod runs it (a process of its own, one thread), the worker forks an `edgetrain`
    workload instead of starting an interpreter: the child has the worker's command line, and
    its output, last error line and exit code come through as from a process of its own."""
    import subprocess

    worker = [sys.executable, "-m", "edgetrain", "worker", "--"]
    failed = subprocess.run([*worker, "edgetrain", "worker", "--inject-failure", "boom", "--",
                             "true"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert failed.returncode == 1, failed.stderr
    assert failed.stderr.splitlines()[:2] == ["edgetrain worker: injected failure: boom",
                                              "edgetrain worker: worker exited with 1"]
    outer = subprocess.Popen([*worker, "edgetrain", "worker", "--", "sleep", "60"],
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (middle := _children(outer.pid)) or not _children(middle[0]):
            assert time.monotonic() < deadline and outer.poll() is None, outer.stderr
            time.sleep(0.1)
        cmdline = Path(f"/proc/{outer.pid}/cmdline").read_bytes()
        assert Path(f"/proc/{middle[0]}/cmdline").read_bytes() == cmdline  # forked, not exec'd
        (sleeper,) = _children(middle[0])
        assert Path(f"/proc/{sleeper}/cmdline").read_bytes() == b"sleep\x0060\x00"  # exec'd
    finally:
        outer.send_signal(signal.SIGTERM)  # forwarded to the workload, which forwards it on
        outer.wait(timeout=60)
    assert outer.returncode != 0


EXIT_IN_A_FORK = """
import atexit, os, sys, threading, time
from pathlib import Path
from edgetrain.operator.worker import exit_as_interpreter
out = Path(sys.argv[1])
pid = os.fork()
if pid == 0:
    atexit.register(lambda: (out / "atexit").write_text("ran"))
    threading.Thread(target=lambda: (time.sleep(0.3), (out / "thread").write_text("joined"))
                     ).start()
    sys.stdout.write("buffered, no newline")
    exit_as_interpreter(3)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_forked_command_ends_as_the_interpreter_would(tmp_path: Path) -> None:
    """The fork's exit skips the teardown, not what a command relies on at exit: a non-daemon
    thread is joined, atexit hooks run, buffered stdout reaches the file, the code is kept."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", EXIT_IN_A_FORK, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("buffered, no newline3\n"), done.stdout
    assert (tmp_path / "thread").read_text() == "joined"
    assert (tmp_path / "atexit").read_text() == "ran"
