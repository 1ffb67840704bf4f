"""The process runtime of a virtual node: one thread per pod runs its containers as local
processes (init containers in order, then the main ones), restarts them by policy and stops
them on deletion. Env, volumes and status reporting come from mixins."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from edgetrain.cluster import binaries
from edgetrain.cluster.container import Container
from edgetrain.cluster.forkserver import shared_fork_server
from edgetrain.cluster.isolation import container_isolation
from edgetrain.cluster.kubelet import ContainerLog
from edgetrain.cluster.nodes import PodHost
from edgetrain.cluster.pod_env import PodEnv
from edgetrain.cluster.pod_status import PodStatus
from edgetrain.cluster.podspec import (
    TERMINATION_LOG,
    PathMap,
    exit_reason,
    expand_vars,
    pod_phase,
    resolve_command,
    should_restart,
)
from edgetrain.cluster.process import die_with_parent, kill_group, log_tail
from edgetrain.cluster.volumes import PodVolumes
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path, now_rfc3339

log = logging.getLogger("edgetrain.vnode")

POLL_S = 0.1
TERMINATION_MESSAGE_MAX_BYTES = 4096
FALLBACK_LOG_LINES = 80


def default_executables() -> dict[str, list[str]]:
    """Container commands that map onto this interpreter (images are not pulled)."""
    py = sys.executable
    return {
        "edgetrain": [py, "-m", "edgetrain"],
        "python": [py],
        "python3": [py],
        "kubectl": [str(binaries.kubectl())] if _has_kubectl() else ["kubectl"],
    }


def _has_kubectl() -> bool:
    try:
        binaries.kubectl()
    except FileNotFoundError:
        return False
    return True


class PodRunner(PodEnv, PodVolumes, PodStatus, threading.Thread):
    """Runs one pod: init containers in order, then the main containers side by side."""

    def __init__(self, node: PodHost, pod: Obj) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.node = node
        self.pod = pod
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        spec = pod["spec"]
        self.restart_policy: str = spec.get("restartPolicy", "Always")
        self.dir = node.dir / "pods" / f"{self.namespace}_{self.pod_name}_{self.uid[:8]}"
        self.root = self.dir / "root"
        self.inits = [Container(c, init=True) for c in spec.get("initContainers", [])]
        self.mains = [Container(c, init=False) for c in spec.get("containers", [])]
        self._delete_grace_s: float | None = None
        self._shutdown = threading.Event()  # agent stopping: kill without API updates
        self._wake = threading.Event()
        self._last_status: Obj | None = None
        self._conditions: dict[str, Obj] = {}
        self._start_time = now_rfc3339()
        self._phase = "Pending"
        self._finalized = False
        # Projected ServiceAccount tokens: (file, audience, lifetime s, monotonic refresh time).
        self._tokens: dict[Path, tuple[str | None, int, float]] = {}

    # --- control from the agent ---

    def request_delete(self, grace_s: float) -> None:
        """The pod has a deletionTimestamp: stop containers within `grace_s`, then finalize."""
        if self._delete_grace_s is None or grace_s < self._delete_grace_s:
            self._delete_grace_s = grace_s
        self._wake.set()

    def shutdown(self) -> None:
        """The agent is stopping: kill every container now, leave the API alone."""
        self._shutdown.set()
        self._wake.set()

    def update(self, pod: Obj) -> None:
        """Newer pod object from the watch (labels/annotations for downward API)."""
        self.pod = pod

    @property
    def client(self) -> KubeClient:
        return self.node.agent.client

    # --- main loop ---

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # report instead of dying silently
            log.exception("pod %s/%s failed in the virtual node", self.namespace, self.pod_name)
            self._kill_all(0.0)
            with contextlib.suppress(Exception):
                self._patch_status(phase="Failed", reason="VirtualNodeError", message=str(exc))
        finally:
            # A deletion that raced with the pod finishing must still be finalized.
            if (self._delete_grace_s is not None and not self._shutdown.is_set()
                    and not self._finalized):
                with contextlib.suppress(Exception):
                    self._finish_deletion()
            self.node.forget(self.uid)

    def _run(self) -> None:
        self._report("Pending")
        while not self._prepare_volumes():
            if self._stop_requested():
                self._finish_deletion()
                return
            self._wake.wait(1.0)
            self._wake.clear()
        for c in self.inits:
            c.waiting_reason = "PodInitializing"
        for c in self.mains:
            c.waiting_reason = "PodInitializing" if self.inits else "ContainerCreating"
        # Init containers: strictly one after another, each to success.
        for c in self.inits:
            c.waiting_reason = "ContainerCreating"
            while True:
                if self._stop_requested():
                    self._finish_deletion()
                    return
                code = self._drive(c)
                if code == 0:
                    break
                if code is not None and c.terminated is not None:
                    self._report(self._phase_now())
                    self._wait_deletion_after_terminal()
                    return
                self._report(self._phase_now())
                self._wake.wait(POLL_S)
                self._wake.clear()
        self._conditions_set("Initialized", True)
        for c in self.mains:
            c.waiting_reason = "ContainerCreating"
        while True:
            if self._stop_requested():
                self._finish_deletion()
                return
            for c in self.mains:
                self._drive(c)
                self._probe(c)
            self._refresh_tokens()
            phase = self._phase_now()
            # A final phase the API server did not take yet (it is restarting) is sent again.
            if self._report(phase) and phase in ("Succeeded", "Failed"):
                self._wait_deletion_after_terminal()
                return
            self._wake.wait(POLL_S)
            self._wake.clear()

    def _stop_requested(self) -> bool:
        return self._shutdown.is_set() or self._delete_grace_s is not None

    def _wait_deletion_after_terminal(self) -> None:
        """A finished pod needs no thread: its deletion is finalized by the node's watch."""
        if self._stop_requested():
            self._finish_deletion()

    def _phase_now(self) -> str:
        if any(c.terminated is not None and c.terminated["exitCode"] != 0 for c in self.inits):
            return "Failed"
        if not all(c.terminated is not None and c.terminated["exitCode"] == 0
                   for c in self.inits):
            return "Pending"
        if all(c.proc is None and c.terminated is None for c in self.mains):
            return "Pending"
        codes = [None if c.terminated is None else int(c.terminated["exitCode"])
                 for c in self.mains]
        restarting = any(c.terminated is None and c.proc is None for c in self.mains)
        return pod_phase(self.restart_policy, codes, restarting)

    def _drive(self, c: Container) -> int | None:
        """Advance one container: start it when due, reap it when it exits. Returns the exit
        code when it exited just now or earlier and will not restart; else None."""
        if c.terminated is not None:
            return int(c.terminated["exitCode"])
        if c.proc is None:
            if time.monotonic() >= c.next_start_s:
                self._start(c)
            return None
        code = c.proc.poll()
        if code is None:
            return None
        term = self._termination(c, code)
        c.proc = None
        policy = "OnFailure" if c.init and self.restart_policy == "Always" else self.restart_policy
        if should_restart(policy, int(term["exitCode"])):
            c.last_terminated = term
            c.restart_count += 1
            backoff_s = min(self.node.agent.restart_backoff_s * 2 ** (c.restart_count - 1),
                            self.node.agent.max_backoff_s)
            c.next_start_s = time.monotonic() + backoff_s
            c.waiting_reason = "CrashLoopBackOff"
            c.waiting_message = (f"back-off {backoff_s:.0f}s restarting failed container="
                                 f"{c.name} pod={self.pod_name}")
            return None
        c.terminated = term
        return int(term["exitCode"])

    def _termination(self, c: Container, returncode: int) -> Obj:
        exit_code = returncode if returncode >= 0 else 128 - returncode
        term: Obj = {
            "exitCode": exit_code,
            "reason": exit_reason(exit_code),
            "startedAt": c.started_at,
            "finishedAt": now_rfc3339(),
        }
        if returncode < 0:
            term["signal"] = -returncode
        if c.proc is not None:
            term["containerID"] = f"vnode://{c.proc.pid}"
        message = self._termination_message(c, exit_code)
        if message:
            term["message"] = message
        return term

    def _termination_message(self, c: Container, exit_code: int) -> str:
        paths = PathMap.for_container(self.root, c.spec)
        msg_path = paths.host(c.spec.get("terminationMessagePath") or TERMINATION_LOG)
        text = ""
        with contextlib.suppress(OSError):
            text = msg_path.read_bytes()[:TERMINATION_MESSAGE_MAX_BYTES].decode(errors="replace")
        policy = c.spec.get("terminationMessagePolicy", "File")
        if not text and policy == "FallbackToLogsOnError" and exit_code != 0:
            text = log_tail(c.log_path, FALLBACK_LOG_LINES)[-2048:]
        return text

    # --- starting a container ---

    def _start(self, c: Container) -> None:
        spec = c.spec
        if not self.node.agent.registry_reachable:
            self._pull_failed(c)
            return
        paths = PathMap.for_container(self.root, spec)
        try:
            env = self._env(spec)
            argv = resolve_command(
                [expand_vars(paths.translate(a), env) for a in spec.get("command", [])],
                [expand_vars(paths.translate(a), env) for a in spec.get("args", [])],
                self.node.agent.executables,
            )
            mounts = self._mount(spec, paths)
            term_log = paths.host(spec.get("terminationMessagePath") or TERMINATION_LOG)
            # The kubelet mounts the termination log read-write into every container. The
            # node's device tree (EDGETRAIN_SYSFS_ROOT: a Jetson's twin) stands for its device
            # files, which no read-only root covers; its own modes and group still apply, and
            # the pod's volumes (a read-only /sys) go over it.
            device = (os.path.realpath(self.node.host_root), False)
            iso = container_isolation(self.pod["spec"], spec,
                                      [device, *mounts, (os.path.realpath(term_log), False)])
        except (ValueError, KubeApiError) as exc:
            c.waiting_reason, c.waiting_message = "CreateContainerConfigError", str(exc)
            c.next_start_s = time.monotonic() + 2.0
            return
        workdir = paths.host(spec["workingDir"]) if spec.get("workingDir") else self.root
        workdir.mkdir(parents=True, exist_ok=True)
        term_log.parent.mkdir(parents=True, exist_ok=True)
        # Empty for each run, and writable by any UID, as the kubelet creates it (0666).
        term_log.write_bytes(b"")
        term_log.chmod(0o666)
        c.log_path = self.log_dir / c.name / f"{c.restart_count}.log"
        c.log_path.parent.mkdir(parents=True, exist_ok=True)
        # The runner thread outlives its containers, so thread-scoped PDEATHSIG only fires
        # when the agent itself dies.
        preexec = iso.enter if iso.needed else die_with_parent
        forks = (shared_fork_server(self.node.agent.executables["edgetrain"])
                 if self.node.agent.preload_pods and "edgetrain" in self.node.agent.executables
                 else None)
        with c.log_path.open("ab") as out:
            try:
                if forks is not None and forks.runs(argv, env):
                    c.proc = forks.start(argv, env=env, cwd=workdir, log_path=c.log_path,
                                         preexec=preexec)
                else:
                    c.proc = subprocess.Popen(
                        argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                        stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec)
            except (OSError, subprocess.SubprocessError) as exc:
                out.write(f"vnode: cannot start {argv[0]}: {exc}\n".encode())
                c.terminated = {
                    "exitCode": 127 if isinstance(exc, FileNotFoundError) else 126,
                    "reason": "StartError", "message": f"cannot start {argv[0]}: {exc}",
                    "startedAt": now_rfc3339(), "finishedAt": now_rfc3339(),
                }
                if should_restart(self.restart_policy, 127):
                    c.last_terminated, c.terminated = c.terminated, None
                    c.restart_count += 1
                    c.next_start_s = time.monotonic() + self.node.agent.max_backoff_s
                    c.waiting_reason = "CrashLoopBackOff"
                return
        # A stable name for the newest log of each container.
        current = self.log_dir / f"{c.name}.log"
        with contextlib.suppress(OSError):
            current.unlink(missing_ok=True)
            current.symlink_to(c.log_path)
        c.started_at = now_rfc3339()
        c.waiting_reason, c.waiting_message = "", ""

    def _pull_failed(self, c: Container) -> None:
        """The image cannot be pulled: ErrImagePull, then ImagePullBackOff until the next try,
        with the kubelet's words (images are never pulled here; the node plays one that cannot
        reach its registry)."""
        image = str(c.spec.get("image", ""))
        if c.waiting_reason == "ErrImagePull":
            c.waiting_reason, c.waiting_message = "ImagePullBackOff", (
                f'Back-off pulling image "{image}"')
        else:
            registry = image.split("/", 1)[0] if "/" in image else "docker.io"
            c.waiting_reason, c.waiting_message = "ErrImagePull", (
                f'failed to pull and unpack image "{image}": failed to resolve reference:'
                f" dial tcp: lookup {registry}: no such host (simulated: the virtual node"
                " cannot reach its registry)")
        c.next_start_s = time.monotonic() + self.node.agent.restart_backoff_s

    def container_log(self, container: str, previous: bool) -> ContainerLog | str:
        """The current (or previous) run's log of one container, for `kubectl logs`."""
        every = [*self.inits, *self.mains]
        names = [c.name for c in every]
        if not container:
            if len(self.mains) != 1:
                return (f"a container name must be specified for pod {self.pod_name}, "
                        f"choose one of: {[c.name for c in self.mains]}")
            container = self.mains[0].name
        c = next((c for c in every if c.name == container), None)
        if c is None:
            return f"container {container!r} is not valid for pod {self.pod_name}: {names}"
        run = c.restart_count - 1 if previous else c.restart_count
        if c.proc is None and c.terminated is None and not previous:
            run -= 1  # waiting to restart: the newest log is the last run's
        path = self.log_dir / c.name / f"{run}.log"
        if run < 0 or not path.exists():
            return (f"previous terminated container {container!r} in pod {self.pod_name!r} "
                    "not found" if previous else
                    f"container {container!r} in pod {self.pod_name!r} is waiting to start")
        current = not previous and run == c.restart_count

        def running() -> bool:
            proc = c.proc
            return current and proc is not None and proc.poll() is None

        return ContainerLog(path, running)

    @property
    def log_dir(self) -> Path:
        """Per-container logs: <container>/<restart>.log and <container>.log (newest)."""
        return self.dir / "logs"

    # --- deletion ---

    def _kill_all(self, grace_s: float) -> None:
        procs = [c.proc for c in [*self.inits, *self.mains]
                 if c.proc is not None and c.proc.poll() is None]
        for p in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.05)
        for p in procs:
            kill_group(p.pid, 0.0, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)

    def _finish_deletion(self) -> None:
        """Stop containers (SIGTERM, grace, SIGKILL), report final states, remove the pod."""
        self._finalized = True
        if self._shutdown.is_set():
            self._kill_all(2.0)
            return
        grace_s = self._delete_grace_s or 0.0
        self._kill_all(grace_s)
        for c in [*self.inits, *self.mains]:
            if c.proc is not None:
                code = c.proc.poll()
                c.terminated = self._termination(c, code if code is not None else -9)
                c.proc = None
        with contextlib.suppress(KubeApiError):
            if self._phase not in ("Succeeded", "Failed"):
                codes = [int(c.terminated["exitCode"]) if c.terminated else 137
                         for c in self.mains]
                self._report("Succeeded" if all(x == 0 for x in codes) else "Failed")
        # The kubelet's final delete: grace 0, guarded by uid so a new pod of the same name
        # is never removed by mistake.
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"uid": self.uid}}
        with contextlib.suppress(KubeApiError):
            self.client.delete(api_path("v1", "pods", self.namespace, self.pod_name), body)
