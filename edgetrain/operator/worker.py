"""`edgetrain worker -- CMD…`: what the operator's pods run around a workload command.

It runs the command, passes its output through (the container log), and publishes results as
ConfigMaps with the pod's service account: files into a cache ConfigMap on success, and the
trainer's JSON progress lines into the job's progress ConfigMap while it runs. It forwards
SIGTERM, so the trainer checkpoints and restores the GPU range when its pod is deleted.
For fault tests it can hold the workload (paused) at its first progress line until a release
ConfigMap exists.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import runpy
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

from edgetrain.api.keys import ANNOTATION_GPU_FREQUENCY_HZ, POWER_MODE_ANNOTATIONS
from edgetrain.api.training import TrainingEvent
from edgetrain.device import DeviceError
from edgetrain.kube import KubeApiError, KubeClient, api_path, wait_for_stop_signal

PROGRESS_KEY = "progress.json"
RESULT_KEY = "result.json"
TERMINATION_MESSAGE_MAX = 4096  # the kubelet's limit per container
ADD_CONFLICT_RETRIES = 20  # writers racing on one ConfigMap: each round one of them wins


def add_to_configmap(
    client: KubeClient,
    namespace: str,
    name: str,
    data: dict[str, str],
    labels: dict[str, str] | None = None,
) -> list[str]:
    """Create the ConfigMap, or add the keys of `data` it lacks; the keys it gained.

    A key already there keeps its first value: cache entries are content-addressed, and two
    jobs that profiled the same key at once must not swap the entry under readers that
    memoised it. The resourceVersion precondition makes a racing writer read again.
    """
    path = api_path("v1", "configmaps", namespace, name)
    for _ in range(ADD_CONFLICT_RETRIES):
        got = client.get_or_none(path)
        if got is None:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
                "data": data,
            }
            try:
                client.create(api_path("v1", "configmaps", namespace), body)
                return sorted(data)
            except KubeApiError as exc:
                if exc.code != 409:
                    raise
                continue  # created meanwhile: add to it
        have = got.get("data") or {}
        new = {k: v for k, v in data.items() if k not in have}
        have_labels = (got.get("metadata") or {}).get("labels") or {}
        if not new and all(have_labels.get(k) == v for k, v in (labels or {}).items()):
            return []
        meta: dict[str, Any] = {"labels": labels or {}}
        version = (got.get("metadata") or {}).get("resourceVersion")
        if version:
            meta["resourceVersion"] = version
        try:
            client.patch(path, {"metadata": meta, "data": new}, "merge")
            return sorted(new)
        except KubeApiError as exc:
            if exc.code not in (404, 409):
                raise  # 404: deleted meanwhile; 409: changed meanwhile; read again
    raise KubeApiError("PATCH", path, 409, "Conflict",
                       f"configmap {namespace}/{name} kept changing over"
                       f" {ADD_CONFLICT_RETRIES} attempts to add {sorted(data)}")


def parse_owner(text: str) -> dict[str, Any]:
    """`API_VERSION:KIND:NAME:UID` (what `--owner` takes) as a controller ownerReference (no
    blockOwnerDeletion: setting it needs rights on the owner a worker does not have)."""
    parts = text.split(":")
    if len(parts) != 4 or not all(parts):
        raise ValueError(f"--owner {text!r}: expected API_VERSION:KIND:NAME:UID")
    api_version, kind, name, uid = parts
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            "controller": True}


def apply_to_configmap(
    client: KubeClient,
    namespace: str,
    name: str,
    data: dict[str, str],
    manager: str,
    labels: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> list[str]:
    """Server-side apply of `data` as field manager `manager`: one request, no read, creating
    the ConfigMap if it is missing. Writers that apply other keys (each its own manager) never
    conflict, so parts that land together cost one request each; the keys applied."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
    client.patch(api_path("v1", "configmaps", namespace, name), body, "apply",
                 fieldManager=manager, force=True)
    return sorted(data)


def publish_files(client: KubeClient, namespace: str, name: str, data: dict[str, str],
                  labels: dict[str, str] | None = None, apply_as: str | None = None,
                  owner: dict[str, Any] | None = None) -> list[str]:
    """Publish a workload's files: applied as `apply_as` (an estimate's part), else added to
    the ConfigMap where missing (a cache entry: the first value wins); the keys written."""
    if apply_as:
        return apply_to_configmap(client, namespace, name, data, apply_as, labels, owner)
    return add_to_configmap(client, namespace, name, data, labels)


def carry_weights(from_dir: Path, to_file: Path) -> bool:
    """Model weights of the checkpoint in `from_dir` as a weights file (once); True if present."""
    if to_file.is_file():
        return True
    ckpt = from_dir / "checkpoint.pt"
    if not ckpt.is_file():
        return False
    import torch

    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    to_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = to_file.with_name(f".{to_file.name}.{os.getpid()}.tmp")
    torch.save(saved["model"], tmp)
    os.replace(tmp, to_file)
    return True


class ProgressPublisher:
    """Throttled merge-patches of the newest progress event into a ConfigMap."""

    def __init__(self, client: KubeClient, namespace: str, name: str, interval_s: float) -> None:
        self.client, self.namespace, self.name = client, namespace, name
        self.interval_s = interval_s
        self._last_sent = 0.0
        self._pending: TrainingEvent | None = None

    def offer(self, event: TrainingEvent) -> None:
        """A trainer event; progress is throttled, a result is sent at once (and retried: the
        operator reads where the segment resumed and the final figures from it)."""
        if event.event == "result":
            self._pending = None  # older than the result
            wire = event.model_dump_json()
            try:
                retry_api(lambda: self._send({RESULT_KEY: wire, PROGRESS_KEY: wire},
                                             quiet=False), "publishing the result")
            except KubeApiError as exc:
                print(f"edgetrain worker: result not published: {exc}", file=sys.stderr)
            return
        self._pending = event
        if time.monotonic() - self._last_sent >= self.interval_s:
            self.flush()

    def flush(self) -> None:
        """Send the newest unsent progress event."""
        if self._pending is not None:
            self._send({PROGRESS_KEY: self._pending.model_dump_json()})
            self._pending = None

    def _send(self, data: dict[str, str], quiet: bool = True) -> None:
        try:
            self.client.patch(
                api_path("v1", "configmaps", self.namespace, self.name), {"data": data}, "merge"
            )
        except KubeApiError as exc:
            if not quiet:
                raise
            print(f"edgetrain worker: progress not published: {exc}", file=sys.stderr)
        self._last_sent = time.monotonic()


# An API server restart (an upgrade, a crash) takes seconds to a minute; a finished workload
# must not be lost, or repeated, because its one publishing request fell into that gap.
PUBLISH_RETRY_S = 120.0


def retry_api(call: Callable[[], None], what: str, deadline_s: float = PUBLISH_RETRY_S) -> None:
    """Run `call`, retrying while the API server cannot be reached or answers 5xx/429."""
    deadline = time.monotonic() + deadline_s
    delay_s = 0.5
    while True:
        try:
            call()
            return
        except KubeApiError as exc:
            transient = exc.code in (0, 429) or exc.code >= 500
            if not transient or time.monotonic() + delay_s > deadline:
                raise
            print(f"edgetrain worker: {what} failed ({exc}); retrying in {delay_s:g} s",
                  file=sys.stderr)
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, 8.0)


RELEASE_POLL_S = 0.5
AGENT_REQUEST_RETRY_S = 30.0  # a clock request waits out a short API-server outage


def is_progress_line(line: str) -> bool:
    """A JSON progress line of any workload (the trainer's comes after each checkpoint)."""
    if not line.lstrip().startswith("{"):
        return False
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and record.get("event") == "progress"


def wait_for_release(client: KubeClient, namespace: str, name: str, stop: threading.Event,
                     poll_s: float = RELEASE_POLL_S) -> str:
    """Poll until ConfigMap `name` exists or `stop` is set; why the wait ended, in words."""
    path = api_path("v1", "configmaps", namespace, name)
    while not stop.is_set():
        try:
            if client.get_or_none(path) is not None:
                return f"configmap {name} exists"
        except KubeApiError as exc:
            if not (exc.code in (0, 429) or exc.code >= 500):
                # A hold nobody can release (no RBAC to read it) must not wedge the pod.
                return f"configmap {name} cannot be read ({exc})"
        stop.wait(poll_s)
    return "stopping"


class ForkedWorkload:
    """`python -m MODULE ARGS` in a fork of the worker: no second interpreter, no second import
    of what the worker holds (on a virtual node, a fork of a server holding torch: torch too).
    The parts of Popen the worker uses: pid, stdout, stderr, send_signal, wait."""

    def __init__(self, module: str, args: Sequence[str]) -> None:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(out_r)
            os.close(err_r)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.close(out_w)
            os.close(err_w)
            exit_as_interpreter(run_module_here(module, args))
        os.close(out_w)
        os.close(err_w)
        self.stdout: IO[str] = open(out_r, encoding=sys.stdout.encoding or "utf-8",  # noqa: SIM115
                                    errors="replace", buffering=1)
        self.stderr: IO[str] = open(err_r, encoding=sys.stderr.encoding or "utf-8",  # noqa: SIM115
                                    errors="replace", buffering=1)
        self.returncode: int | None = None

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def run_module_here(module: str, args: Sequence[str]) -> int:
    """What `python -m MODULE ARGS` does, in this process; its exit code (a crash: the
    traceback and 1, as the interpreter reports it)."""
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return int(exc.code or 0)
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def exit_as_interpreter(code: int) -> NoReturn:
    """End a forked command as `python -m` ends, less the teardown: non-daemon threads joined,
    atexit hooks run, stdio flushed, then `os._exit(code)` (as multiprocessing's forks end)."""
    # The teardown frees every object one at a time: in a fork of a process holding torch, a
    # second of CPU and a private copy of each page it touches, for memory the kernel frees.
    getattr(threading, "_shutdown")()  # noqa: B009 (private: what the interpreter calls)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


class StderrTail:
    """Passes a child's stderr through and keeps its last non-empty line (the one-line error)."""

    def __init__(self, stream: IO[str] | None) -> None:
        self.last_line = ""
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str] | None) -> None:
        if stream is None:
            return
        for line in stream:
            sys.stderr.write(line)
            sys.stderr.flush()
            if line.strip():
                self.last_line = line.strip()

    def join(self) -> None:
        """Wait until the child's stderr is drained."""
        self._thread.join(timeout=10)


def write_termination_message(message: str) -> None:
    """The pod's termination message: the workload's last error line, not a log tail.

    Kubernetes prefers this file to the log (FallbackToLogsOnError), so a bad input shows as
    its one line in the Job's pod status and the PATJ's message. The operator's pods set
    EDGETRAIN_TERMINATION_LOG; without it (a shell, a test) nothing is written.
    """
    target = os.environ.get("EDGETRAIN_TERMINATION_LOG")
    if not target:
        return
    path = Path(target)
    with contextlib.suppress(OSError):
        path.write_text(message[-TERMINATION_MESSAGE_MAX:], encoding="utf-8")


def run_worker(
    command: Sequence[str],
    *,
    namespace: str,
    publish: str | None = None,
    files: dict[str, Path] | None = None,
    labels: dict[str, str] | None = None,
    apply_as: str | None = None,
    owner: dict[str, Any] | None = None,
    progress: str | None = None,
    progress_interval_s: float = 1.0,
    hold: bool = False,
    inject_failure: str | None = None,
    hold_at_progress: str | None = None,
    carry_from: Path | None = None,
    carry_to: Path | None = None,
    pretrain: dict[str, Any] | None = None,
    sa_dir: Path | None = None,
    client: KubeClient | None = None,
) -> int:
    """Run `command`; publish results; returns the exit code for the container."""
    if inject_failure:
        print(f"edgetrain worker: injected failure: {inject_failure}", file=sys.stderr)
        return 1
    if not command:
        print("edgetrain worker: no command after --", file=sys.stderr)
        return 2
    argv = list(command)
    if argv[0] == "edgetrain":
        argv = [sys.executable, "-m", "edgetrain", *argv[1:]]
    if pretrain:
        from edgetrain.api.training import Precision
        from edgetrain.workloads.weights import PretrainSpec
        from edgetrain.workloads.weights import pretrain as make_weights

        recipe = dict(pretrain)
        # Where to pretrain is not part of the recipe (the cache key): the job's compute choice.
        device = str(recipe.pop("device", "auto"))
        precision = Precision(str(recipe.pop("precision", "fp32")))
        weights = make_weights(
            PretrainSpec.model_validate(recipe), None, device=device, precision=precision
        )
        argv += ["--weights", str(weights)]
    if carry_from is not None and carry_to is not None and carry_weights(carry_from, carry_to):
        # A re-plan changed the batch size: start the new segment from the last checkpoint.
        argv += ["--weights", str(carry_to)]
    kube = client or (
        KubeClient.connect(sa_dir=sa_dir) if (publish or progress or hold_at_progress) else None
    )
    publisher = (
        ProgressPublisher(kube, namespace, progress, progress_interval_s)
        if kube is not None and progress
        else None
    )
    # An `edgetrain` workload runs in a fork of this interpreter where nothing else runs here
    # yet: after a pretrain, torch's thread pools would not survive it, and another thread's
    # lock (a stream's, say) would stay locked in the child.
    forkable = command[0] == "edgetrain" and not pretrain and threading.active_count() == 1
    proc: subprocess.Popen[str] | ForkedWorkload = (
        ForkedWorkload("edgetrain", argv[3:]) if forkable
        else subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              bufsize=1))
    errors = StderrTail(proc.stderr)
    stopping = threading.Event()

    def forward(signum: int, _frame: object) -> None:
        stopping.set()
        proc.send_signal(signal.SIGCONT)  # a held workload must run to see the signal
        proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    assert proc.stdout is not None
    hold_release = hold_at_progress if kube is not None else None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        held = hold_release is not None and not stopping.is_set() and is_progress_line(line)
        if held:
            proc.send_signal(signal.SIGSTOP)  # first, so that it stops at this checkpoint
        event = TrainingEvent.from_line(line) if publisher is not None else None
        if publisher is not None and event is not None:
            publisher.offer(event)
        if held and kube is not None and hold_release is not None:
            if publisher is not None:
                publisher.flush()  # the job's status shows where it is held
            print(f"edgetrain worker: holding the workload until configmap {hold_release}"
                  " exists (fault injection)", file=sys.stderr, flush=True)
            why = wait_for_release(kube, namespace, hold_release, stopping)
            proc.send_signal(signal.SIGCONT)
            print(f"edgetrain worker: released: {why}", file=sys.stderr, flush=True)
            hold_release = None
    code = proc.wait()
    errors.join()
    if publisher is not None:
        publisher.flush()
    if code != 0:
        what = argv[3] if len(argv) > 3 else argv[0]
        print(f"edgetrain worker: {what} exited with {code}", file=sys.stderr)
        write_termination_message(errors.last_line or f"{what} exited with {code}")
        return code
    if publish and kube is not None:
        data = {key: path.read_text(encoding="utf-8") for key, path in (files or {}).items()}
        client_ = kube
        added: list[str] = []

        def add() -> None:
            added[:] = publish_files(client_, namespace, publish, data, labels, apply_as,
                                     owner)

        retry_api(add, f"publishing configmap {publish}")
        kept = sorted(set(data) - set(added))
        print(f"edgetrain worker: published {sorted(added)} to configmap {publish}"
              + (f"; kept the {kept} already there" if kept else ""), file=sys.stderr)
    if hold:
        wait_for_stop_signal(threading.Event())
    return 0


def _ask_agent(client: KubeClient, namespace: str, pod: str, annotations: dict[str, str | None],
               what: str, asking: bool) -> None:
    """Annotate this pod for the node agent (a value None removes its key)."""
    path = api_path("v1", "pods", namespace, pod)

    def send() -> None:
        client.patch(path, {"metadata": {"annotations": annotations}}, "merge")

    try:
        retry_api(send, f"asking the node agent for {what}", deadline_s=AGENT_REQUEST_RETRY_S)
    except KubeApiError as exc:
        if asking:
            raise DeviceError(
                f"could not ask the node agent for {what} on pod {namespace}/{pod}: {exc} (the"
                " worker role needs patch on pods: chart operator.settings.profileClocksByAgent"
                " with agent.enabled)") from None
        # Releasing at exit: the pod's end releases it too.
        print(f"edgetrain worker: release of {what} on pod {namespace}/{pod} not sent",
              file=sys.stderr)


def agent_clock_request(client: KubeClient, namespace: str, pod: str) -> Callable[[int | None],
                                                                                   None]:
    """A profiling pod's clock requests to the node agent: the GPU frequency annotation on its
    own pod, which the agent pins while the pod is active (None removes it: the agent then
    restores the range)."""

    def request(gpu_freq_hz: int | None) -> None:
        value = None if gpu_freq_hz is None else str(gpu_freq_hz)
        _ask_agent(client, namespace, pod, {ANNOTATION_GPU_FREQUENCY_HZ: value},
                   f"the GPU at {gpu_freq_hz} Hz" if value else "the GPU clock back",
                   gpu_freq_hz is not None)

    return request


def agent_mode_request(client: KubeClient, namespace: str, pod: str,
                       ) -> Callable[[tuple[int, int, int] | None], None]:
    """A profiling pod's power-mode requests to the node agent: (CPU cores, CPU clock cap Hz,
    EMC Hz) as the power-mode annotations on its own pod, which the agent sets with the pod's
    GPU pin (None removes them: the agent then restores the board's mode)."""

    def request(mode: tuple[int, int, int] | None) -> None:
        values = [None] * len(POWER_MODE_ANNOTATIONS) if mode is None else [str(v) for v in mode]
        _ask_agent(client, namespace, pod, dict(zip(POWER_MODE_ANNOTATIONS, values, strict=True)),
                   f"power mode {mode}" if mode else "the power mode back", mode is not None)

    return request
