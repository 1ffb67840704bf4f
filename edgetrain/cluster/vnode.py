"""Virtual nodes: register Nodes with Jetson labels, keep Leases fresh, own a device twin, and
run the pods bound to them as local processes with real status reporting."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from edgetrain.cluster import binaries
from edgetrain.cluster.boards import NodeProfile, profile
from edgetrain.cluster.kubelet import AddressClaim, ContainerLog, KubeletServer, http_probe
from edgetrain.cluster.pki import Pki, issue_serving_pair, write_atomic
from edgetrain.cluster.podspec import (
    TERMINATION_LOG,
    PathMap,
    exit_reason,
    expand_vars,
    field_ref,
    pod_phase,
    resolve_command,
    resource_field,
    should_restart,
)
from edgetrain.cluster.process import die_with_parent, kill_group, log_tail
from edgetrain.cluster.twin import Twin, TwinFactory, default_twin_factory
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path

log = logging.getLogger("edgetrain.vnode")

LOOPBACK = "127.0.0.1"
LEASE_DURATION_S = 40
LEASE_RENEW_S = 10.0
STATUS_REPORT_S = 60.0
POLL_S = 0.1
TERMINATION_MESSAGE_MAX_BYTES = 4096
FALLBACK_LOG_LINES = 80
TOKEN_REFRESH_FRACTION = 0.8
PROBE_PERIOD_MAX_S = 2.0
# Env passed through from the agent: processes need a PATH and a HOME to work at all.
PASSTHROUGH_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")


def now_rfc3339() -> str:
    """UTC timestamp with second precision (metav1.Time)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """UTC timestamp with microseconds (metav1.MicroTime, used by Leases)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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


@dataclass(frozen=True)
class VNodeSpec:
    """One virtual node to run."""

    name: str
    profile: NodeProfile


def node_specs(counts: Mapping[str, int], servers: int = 0, prefix: str = "vnode",
               ) -> list[VNodeSpec]:
    """Named specs: <prefix>-<board>-<i> for each board count, <prefix>-gpu-server-<i>."""
    out: list[VNodeSpec] = []
    for board, count in counts.items():
        prof = profile(board)
        out += [VNodeSpec(f"{prefix}-{prof.board}-{i}", prof) for i in range(count)]
    server = profile("server")
    out += [VNodeSpec(f"{prefix}-{server.board}-{i}", server) for i in range(servers)]
    return out


# --------------------------------------------------------------------------------------------
# containers and pods


@dataclass
class _Container:
    """Runtime state of one container of a pod."""

    spec: Obj
    init: bool
    restart_count: int = 0
    proc: subprocess.Popen[bytes] | None = None
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


class PodRunner(threading.Thread):
    """Runs one pod: init containers in order, then the main containers side by side."""

    def __init__(self, node: VirtualNode, pod: Obj) -> None:
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
        self.inits = [_Container(c, init=True) for c in spec.get("initContainers", [])]
        self.mains = [_Container(c, init=False) for c in spec.get("containers", [])]
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
            self._report(phase)
            if phase in ("Succeeded", "Failed"):
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

    def _drive(self, c: _Container) -> int | None:
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

    def _termination(self, c: _Container, returncode: int) -> Obj:
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

    def _termination_message(self, c: _Container, exit_code: int) -> str:
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

    def _start(self, c: _Container) -> None:
        spec = c.spec
        paths = PathMap.for_container(self.root, spec)
        try:
            env = self._env(spec)
            argv = resolve_command(
                [expand_vars(paths.translate(a), env) for a in spec.get("command", [])],
                [expand_vars(paths.translate(a), env) for a in spec.get("args", [])],
                self.node.agent.executables,
            )
            self._mount(spec, paths)
        except (ValueError, KubeApiError) as exc:
            c.waiting_reason, c.waiting_message = "CreateContainerConfigError", str(exc)
            c.next_start_s = time.monotonic() + 2.0
            return
        workdir = paths.host(spec["workingDir"]) if spec.get("workingDir") else self.root
        workdir.mkdir(parents=True, exist_ok=True)
        term_log = paths.host(spec.get("terminationMessagePath") or TERMINATION_LOG)
        term_log.parent.mkdir(parents=True, exist_ok=True)
        term_log.unlink(missing_ok=True)
        c.log_path = self.log_dir / c.name / f"{c.restart_count}.log"
        c.log_path.parent.mkdir(parents=True, exist_ok=True)
        with c.log_path.open("ab") as out:
            try:
                c.proc = subprocess.Popen(
                    argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True,
                    # The runner thread outlives its containers, so thread-scoped PDEATHSIG
                    # only fires when the agent itself dies.
                    preexec_fn=die_with_parent,
                )
            except OSError as exc:
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

    def _env(self, spec: Obj) -> dict[str, str]:
        agent = self.node.agent
        env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
        # Resolve `edgetrain`, `kubectl` and `python` to this installation first.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env.update({
            "HOSTNAME": self.pod_name,
            "PYTHONUNBUFFERED": "1",
            "EDGETRAIN_NODE_NAME": self.node.name,
            "EDGETRAIN_POD_ROOT": str(self.root),
            "EDGETRAIN_SYSFS_ROOT": str(self.node.host_root),
            "KUBERNETES_SERVICE_HOST": agent.api_host,
            "KUBERNETES_SERVICE_PORT": str(agent.api_port),
        })
        pod = self.pod
        paths = PathMap.for_container(self.root, spec)
        for src in spec.get("envFrom", []):
            prefix = src.get("prefix", "")
            if "configMapRef" in src:
                ref = src["configMapRef"]
                data = self._config_data("configmaps", ref["name"], ref.get("optional", False))
            else:
                ref = src["secretRef"]
                data = self._config_data("secrets", ref["name"], ref.get("optional", False))
            env.update({prefix + k: v for k, v in data.items()})
        for var in spec.get("env", []):
            name = var["name"]
            if "value" in var:
                # A literal value naming a mount path must point at the pod's host copy.
                env[name] = expand_vars(paths.translate(str(var["value"])), env)
                continue
            src = var.get("valueFrom", {})
            if "fieldRef" in src:
                env[name] = field_ref(pod, src["fieldRef"]["fieldPath"], self.node.address)
            elif "resourceFieldRef" in src:
                ref = src["resourceFieldRef"]
                target = next((c for c in [*self.inits, *self.mains]
                               if c.name == ref.get("containerName", spec["name"])), None)
                env[name] = resource_field(target.spec if target else spec, ref["resource"],
                                           str(ref.get("divisor", "1")),
                                           self.node.spec.profile.capacity())
            elif "configMapKeyRef" in src or "secretKeyRef" in src:
                is_cm = "configMapKeyRef" in src
                ref = src["configMapKeyRef" if is_cm else "secretKeyRef"]
                optional = bool(ref.get("optional", False))
                data = self._config_data("configmaps" if is_cm else "secrets", ref["name"],
                                         optional)
                if ref["key"] in data:
                    env[name] = data[ref["key"]]
                elif not optional:
                    raise ValueError(f"key {ref['key']!r} not found in {ref['name']!r}")
        return env

    def _config_data(self, plural: str, name: str, optional: bool) -> dict[str, str]:
        """data of a ConfigMap or Secret (decoded); {} if optional and missing."""
        obj = self.client.get_or_none(api_path("v1", plural, self.namespace, name))
        if obj is None:
            if optional:
                return {}
            raise ValueError(f"{plural[:-1]} {self.namespace}/{name} not found")
        if plural == "secrets":
            return {k: base64.b64decode(v).decode(errors="replace")
                    for k, v in (obj.get("data") or {}).items()}
        out = dict(obj.get("data") or {})
        out.update({k: base64.b64decode(v).decode(errors="replace")
                    for k, v in (obj.get("binaryData") or {}).items()})
        return out

    # --- volumes ---

    def _volume_dir(self, name: str) -> Path:
        return self.dir / "volumes" / name

    def _prepare_volumes(self) -> bool:
        """Materialise every volume under the pod dir; False (retry later) if a source is
        missing, as the kubelet keeps the pod in ContainerCreating."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            for vol in self.pod["spec"].get("volumes", []):
                self._materialise(vol)
        except (ValueError, KubeApiError) as exc:
            for c in [*self.inits, *self.mains]:
                c.waiting_reason, c.waiting_message = "ContainerCreating", str(exc)
            self._report("Pending")
            return False
        return True

    def _write_items(self, target: Path, data: Mapping[str, bytes], items: Sequence[Obj] | None,
                     ) -> None:
        if items:
            for item in items:
                if item["key"] in data:
                    write_atomic(target / item["path"], data[item["key"]], 0o644)
        else:
            for key, value in data.items():
                write_atomic(target / key, value, 0o644)

    def _source_bytes(self, plural: str, name: str, optional: bool) -> dict[str, bytes]:
        obj = self.client.get_or_none(api_path("v1", plural, self.namespace, name))
        if obj is None:
            if optional:
                return {}
            raise ValueError(f"{plural[:-1]} {self.namespace}/{name} not found")
        out: dict[str, bytes] = {}
        if plural == "secrets":
            out = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        else:
            out = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
            out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        return out

    def _downward_items(self, target: Path, items: Sequence[Obj]) -> None:
        for item in items:
            if "fieldRef" in item:
                value = field_ref(self.pod, item["fieldRef"]["fieldPath"], self.node.address)
            else:
                ref = item["resourceFieldRef"]
                container = next((c.spec for c in self.mains
                                  if c.name == ref.get("containerName")), {})
                value = resource_field(container, ref["resource"], str(ref.get("divisor", "1")),
                                       self.node.spec.profile.capacity())
            write_atomic(target / item["path"], value.encode(), 0o644)

    def _materialise(self, vol: Obj) -> None:
        target = self._volume_dir(vol["name"])
        if "hostPath" in vol:
            # The node's host filesystem is its twin root: /sys here is the twin's sysfs.
            src = self.node.host_root / vol["hostPath"]["path"].lstrip("/")
            kind = vol["hostPath"].get("type", "")
            if kind in ("DirectoryOrCreate", "") and not src.exists():
                src.mkdir(parents=True, exist_ok=True)
            elif kind == "FileOrCreate" and not src.exists():
                src.parent.mkdir(parents=True, exist_ok=True)
                src.touch()
            if target.is_symlink() or target.exists():
                return
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(src)
            return
        target.mkdir(parents=True, exist_ok=True)
        if "projected" in vol:
            for source in vol["projected"].get("sources", []):
                self._projected(target, source)
        elif "secret" in vol:  # a secret volume names its source `secretName`, a projection `name`
            ref = vol["secret"]
            self._projected(target, {"secret": {**ref, "name": ref["secretName"]}})
        else:
            # configMap and downwardAPI volumes have the shape of a projected source; emptyDir
            # and anything else stay an empty directory owned by the pod.
            self._projected(target, vol)

    def _projected(self, target: Path, source: Obj) -> None:
        if "serviceAccountToken" in source:
            sat = source["serviceAccountToken"]
            audience = sat.get("audience")
            lifetime_s = max(int(sat.get("expirationSeconds", 3600)), 600)
            token = self._service_account_token(audience, lifetime_s)
            write_atomic(target / sat["path"], token.encode(), 0o600)
            # The kubelet renews a token once it is 80 % through its life.
            self._tokens[target / sat["path"]] = (
                audience, lifetime_s, time.monotonic() + TOKEN_REFRESH_FRACTION * lifetime_s)
        elif "configMap" in source:
            ref = source["configMap"]
            data = self._source_bytes("configmaps", ref["name"], ref.get("optional", False))
            self._write_items(target, data, ref.get("items"))
        elif "secret" in source:
            ref = source["secret"]
            data = self._source_bytes("secrets", ref["name"], ref.get("optional", False))
            self._write_items(target, data, ref.get("items"))
        elif "downwardAPI" in source:
            self._downward_items(target, source["downwardAPI"].get("items", []))

    def _refresh_tokens(self) -> None:
        """Renew projected tokens before they expire, as the kubelet does."""
        now = time.monotonic()
        for path, (audience, lifetime_s, due_s) in list(self._tokens.items()):
            if now < due_s:
                continue
            try:
                token = self._service_account_token(audience, lifetime_s)
            except KubeApiError as exc:
                log.warning("pod %s/%s: token refresh failed: %s", self.namespace,
                            self.pod_name, exc)
                self._tokens[path] = (audience, lifetime_s, now + 5.0)
                continue
            write_atomic(path, token.encode(), 0o600)
            self._tokens[path] = (audience, lifetime_s, now + TOKEN_REFRESH_FRACTION * lifetime_s)

    def _probe(self, c: _Container) -> None:
        """Run a due httpGet readinessProbe (other probe kinds count as passing)."""
        probe = (c.spec.get("readinessProbe") or {}).get("httpGet")
        if probe is None or c.proc is None or c.proc.poll() is not None:
            c.probe_ready = probe is None
            return
        now = time.monotonic()
        if now < c.next_probe_s:
            return
        spec = c.spec["readinessProbe"]
        port = probe.get("port")
        if isinstance(port, str) and not port.isdigit():
            port = next((p.get("containerPort") for p in c.spec.get("ports", [])
                         if p.get("name") == port), None)
        if port is None:
            c.probe_ready = False
        else:
            c.probe_ready = http_probe(probe.get("host") or self.node.address, int(port),
                                       str(probe.get("path", "/")),
                                       str(probe.get("scheme", "HTTP")),
                                       float(spec.get("timeoutSeconds", 1)))
        # Probe at most every PROBE_PERIOD_MAX_S so `helm install --wait` does not idle.
        c.next_probe_s = now + min(float(spec.get("periodSeconds", 10)), PROBE_PERIOD_MAX_S)

    def _service_account_token(self, audience: str | None, expiration_s: int) -> str:
        """A bound token for the pod's service account (TokenRequest API, like the kubelet)."""
        sa = self.pod["spec"].get("serviceAccountName", "default")
        body: Obj = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [audience] if audience else [],
                "expirationSeconds": max(expiration_s, 600),
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.pod_name,
                                   "uid": self.uid},
            },
        }
        path = api_path("v1", "serviceaccounts", self.namespace, sa, "token")
        return str(self.client.create(path, body)["status"]["token"])

    def _mount(self, spec: Obj, paths: PathMap) -> None:
        """Link each volumeMount (with subPath) at its translated container path."""
        for m in spec.get("volumeMounts", []):
            src = self._volume_dir(m["name"])
            if m.get("subPath"):
                src = src / m["subPath"]
                if not src.exists():
                    src.mkdir(parents=True, exist_ok=True)
            dst = paths.host(m["mountPath"])
            if dst.is_symlink():
                if dst.resolve() == src.resolve():
                    continue
                dst.unlink()
            elif dst.exists():
                continue  # a parent mount already placed something here
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(src)

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

    # --- status ---

    def _conditions_set(self, kind: str, value: bool, reason: str = "") -> None:
        status = "True" if value else "False"
        old = self._conditions.get(kind)
        if old is not None and old["status"] == status:
            return
        cond: Obj = {"type": kind, "status": status, "lastProbeTime": None,
                     "lastTransitionTime": now_rfc3339()}
        if reason:
            cond["reason"] = reason
        self._conditions[kind] = cond

    def _report(self, phase: str) -> None:
        running = all(c.proc is not None and c.proc.poll() is None for c in self.mains)
        self._conditions_set("PodScheduled", True)
        self._conditions_set("PodReadyToStartContainers", True)
        self._conditions_set("Initialized", all(c.terminated is not None for c in self.inits),
                             "" if not self.inits else "ContainersNotInitialized")
        ready = running and phase == "Running" and all(c.probe_ready for c in self.mains)
        reason = "" if ready else ("PodCompleted" if phase in ("Succeeded", "Failed")
                                   else "ContainersNotReady")
        self._conditions_set("ContainersReady", ready, reason)
        self._conditions_set("Ready", ready, reason)
        self._patch_status(phase=phase)

    def _patch_status(self, phase: str, reason: str = "", message: str = "") -> None:
        status: Obj = {
            "phase": phase,
            # Every pod shares its node's address, as host-network pods do.
            "hostIP": self.node.address,
            "hostIPs": [{"ip": self.node.address}],
            "podIP": self.node.address,
            "podIPs": [{"ip": self.node.address}],
            "startTime": self._start_time,
            "message": message or f"vnode logs: {self.log_dir}",
            "conditions": list(self._conditions.values()),
            "containerStatuses": [c.status() for c in self.mains],
        }
        if reason:
            status["reason"] = reason
        if self.inits:
            status["initContainerStatuses"] = [c.status() for c in self.inits]
        if status == self._last_status:
            return
        path = api_path("v1", "pods", self.namespace, self.pod_name, "status")
        try:
            self.client.patch(path, {"status": status}, "strategic")
        except KubeApiError as exc:
            if exc.code == 404:
                self.shutdown()  # force-deleted: nothing to report to any more
                return
            raise
        self._last_status = status
        self._phase = phase


# --------------------------------------------------------------------------------------------
# nodes


class VirtualNode:
    """One Node object, its Lease, its device twin and its pod runners."""

    def __init__(self, agent: VNodeAgent, spec: VNodeSpec) -> None:
        self.agent = agent
        self.spec = spec
        self.name = spec.name
        self.dir = agent.work_dir / spec.name
        self.twin: Twin | None = None
        self.runners: dict[str, PodRunner] = {}
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self.uid: str = ""
        self._claim: AddressClaim | None = None
        self.kubelet: KubeletServer | None = None

    @property
    def address(self) -> str:
        """The node's own loopback address (InternalIP, host and pod IP of its pods)."""
        return self._claim.address if self._claim is not None else LOOPBACK

    @property
    def host_root(self) -> Path:
        """The node's host filesystem: the twin root on Jetson nodes, a plain dir otherwise."""
        return self.twin.root if self.twin is not None else self.dir / "host"

    def start(self) -> None:
        """Build the twin, register the Node and its Lease, start watching its pods."""
        shutil.rmtree(self.dir / "pods", ignore_errors=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.spec.profile.kind == "jetson":
            self.twin = self.agent.twin_factory(self.spec.profile.board, self.dir / "twin")
        else:
            (self.dir / "host").mkdir(parents=True, exist_ok=True)
        self._claim = AddressClaim()
        cert, key = issue_serving_pair(self.name, [self.address], self.agent.cluster_ca)
        self.kubelet = KubeletServer(
            self.address, cert, key,
            self.agent.cluster_ca.ca_crt if self.agent.cluster_ca is not None else None,
            self.find_log).start()
        self.register()
        self.renew_lease()
        self._watcher = threading.Thread(target=self._watch_pods, name=f"watch-{self.name}",
                                         daemon=True)
        self._watcher.start()

    def node_object(self) -> Obj:
        """The Node as the node agent would register it."""
        prof = self.spec.profile
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": prof.labels(self.name),
                "annotations": {**prof.annotations(),
                                "edgetrain.io/vnode-dir": str(self.dir),
                                "node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {},
        }

    def node_status(self) -> Obj:
        """status: capacity, conditions (Ready), addresses, nodeInfo."""
        prof = self.spec.profile
        now = now_rfc3339()

        def cond(kind: str, status: str, reason: str, message: str) -> Obj:
            return {"type": kind, "status": status, "reason": reason, "message": message,
                    "lastHeartbeatTime": now, "lastTransitionTime": self.agent.started_at}

        return {
            "capacity": prof.capacity(),
            "allocatable": prof.capacity(),
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "ok"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "ok"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "ok"),
                cond("Ready", "True", "KubeletReady", "edgetrain virtual node is posting ready"),
            ],
            "addresses": [{"type": "InternalIP", "address": self.address},
                          {"type": "Hostname", "address": self.name}],
            "daemonEndpoints": {"kubeletEndpoint": {
                "Port": self.kubelet.port if self.kubelet is not None else 0}},
            "nodeInfo": {
                "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, self.name).hex,
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, self.name)),
                "bootID": self.agent.boot_id,
                "kernelVersion": prof.kernel,
                "osImage": prof.os_image_text,
                "containerRuntimeVersion": "edgetrain-vnode://0.1.0",
                "kubeletVersion": binaries.K8S_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": prof.arch,
            },
        }

    def register(self) -> None:
        """Create or update the Node, then post its status."""
        client = self.agent.client
        obj = self.node_object()
        try:
            node = client.create("/api/v1/nodes", obj)
        except KubeApiError as exc:
            if exc.code != 409:
                raise
            node = client.patch(api_path("v1", "nodes", name=self.name),
                                {"metadata": obj["metadata"]}, "merge")
        self.uid = node["metadata"]["uid"]
        self.post_status()

    def post_status(self) -> None:
        """PATCH status (heartbeat in conditions)."""
        self.agent.client.patch(api_path("v1", "nodes", name=self.name, subresource="status"),
                                {"status": self.node_status()}, "strategic")

    def renew_lease(self) -> None:
        """Create or renew kube-node-lease/<node> (what the node lifecycle controller reads)."""
        client = self.agent.client
        path = api_path("coordination.k8s.io/v1", "leases", "kube-node-lease", self.name)
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_DURATION_S,
                "renewTime": now_micro()}
        try:
            client.patch(path, {"spec": spec}, "merge")
        except KubeApiError as exc:
            if exc.code != 404:
                raise
            client.create(api_path("coordination.k8s.io/v1", "leases", "kube-node-lease"), {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "namespace": "kube-node-lease",
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.name,
                                         "uid": self.uid}],
                },
                "spec": spec,
            })

    def _watch_pods(self) -> None:
        stop = self.agent.stop_event
        selector = f"spec.nodeName={self.name}"
        for kind, pod in self.agent.client.list_watch("/api/v1/pods", stop,
                                                      fieldSelector=selector):
            try:
                self._on_pod(kind, pod)
            except Exception:
                log.exception("node %s: handling pod event failed", self.name)

    def _on_pod(self, kind: str, pod: Obj) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        if self.agent.stop_event.is_set():
            return
        with self._lock:
            runner = self.runners.get(uid)
            if kind == "DELETED":
                if runner is not None:
                    runner.shutdown()  # force-deleted: the object is gone, just stop
                return
            if runner is not None:
                runner.update(pod)
                if meta.get("deletionTimestamp"):
                    runner.request_delete(_grace_s(pod))
                return
            phase = pod.get("status", {}).get("phase", "Pending")
            if meta.get("deletionTimestamp"):
                # Nothing runs for it here (finished, or from a previous agent): finalize.
                body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
                with contextlib.suppress(KubeApiError):
                    self.agent.client.delete(
                        api_path("v1", "pods", meta["namespace"], meta["name"]), body)
                return
            if phase in ("Succeeded", "Failed") or uid in self.agent.finished:
                return
            runner = PodRunner(self, pod)
            self.runners[uid] = runner
        runner.start()

    def find_log(self, namespace: str, pod: str, container: str, previous: bool,
                 ) -> ContainerLog | str:
        """A container's log for the kubelet endpoint (running or finished pods)."""
        with self._lock:
            runner = next((r for r in self.runners.values()
                           if r.namespace == namespace and r.pod_name == pod), None)
        if runner is not None:
            return runner.container_log(container, previous)
        dirs = sorted((self.dir / "pods").glob(f"{namespace}_{pod}_*"),
                      key=lambda d: d.stat().st_mtime)
        if not dirs:
            return f"pod {namespace}/{pod} has not run on node {self.name}"
        logs = dirs[-1] / "logs"
        names = sorted(p.stem for p in logs.glob("*.log"))
        name = container or (names[0] if len(names) == 1 else "")
        if not name:
            return (f"a container name must be specified for pod {pod}, choose one of: "
                    f"{names}")
        runs = sorted((logs / name).glob("*.log"), key=lambda p: int(p.stem))
        if len(runs) < (2 if previous else 1):
            return f"previous terminated container {name!r} in pod {pod!r} not found" \
                if previous else f"container {name!r} in pod {pod!r} has no log"
        return ContainerLog(runs[-2] if previous else runs[-1], lambda: False)

    def forget(self, uid: str) -> None:
        """A runner ended."""
        with self._lock:
            self.runners.pop(uid, None)
            self.agent.finished.add(uid)

    def stop(self, delete_node: bool) -> None:
        """Kill this node's pods; optionally delete the Node (its pods are then GC'd)."""
        with self._lock:
            runners = list(self.runners.values())
        for r in runners:
            r.shutdown()
        for r in runners:
            r.join(timeout=10)
        if self.twin is not None:
            with contextlib.suppress(Exception):
                self.twin.close()
        if self.kubelet is not None:
            self.kubelet.stop()
        if self._claim is not None:
            self._claim.release()
        if delete_node:
            with contextlib.suppress(Exception):
                self.agent.client.delete_ignore_missing(api_path("v1", "nodes", name=self.name))


def _grace_s(pod: Obj) -> float:
    meta, spec = pod["metadata"], pod.get("spec", {})
    grace = meta.get("deletionGracePeriodSeconds")
    if grace is None:
        grace = spec.get("terminationGracePeriodSeconds", 30)
    return float(grace)


@dataclass
class VNodeAgent:
    """Runs a set of virtual nodes against one API server (any cluster, by kubeconfig)."""

    client: KubeClient
    specs: Sequence[VNodeSpec]
    work_dir: Path
    twin_factory: TwinFactory = field(default_factory=default_twin_factory)
    executables: dict[str, list[str]] = field(default_factory=default_executables)
    restart_backoff_s: float = 10.0  # kubelet: 10 s doubling up to 5 min
    max_backoff_s: float = 300.0
    delete_nodes_on_stop: bool = True
    # The cluster's CA: kubelet serving certs are signed with it and only API-server client
    # certs it signed may read logs. None (a foreign cluster): self-signed, any TLS client.
    cluster_ca: Pki | None = None
    stop_event: threading.Event = field(default_factory=threading.Event)
    nodes: list[VirtualNode] = field(default_factory=list)
    finished: set[str] = field(default_factory=set)
    started_at: str = field(default_factory=now_rfc3339)
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    _heartbeat: threading.Thread | None = None

    @property
    def api_host(self) -> str:
        """Host of the API server (for KUBERNETES_SERVICE_HOST in pods)."""
        return urlparse(self.client.server).hostname or LOOPBACK

    @property
    def api_port(self) -> int:
        """Port of the API server."""
        return urlparse(self.client.server).port or 443

    def start(self) -> VNodeAgent:
        """Register every node and start heartbeats and pod watches."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        for spec in self.specs:
            node = VirtualNode(self, spec)
            node.start()
            self.nodes.append(node)
        self._heartbeat = threading.Thread(target=self._beat, name="vnode-heartbeat",
                                           daemon=True)
        self._heartbeat.start()
        return self

    def _beat(self) -> None:
        last_status_s = time.monotonic()
        while not self.stop_event.wait(LEASE_RENEW_S):
            report = time.monotonic() - last_status_s >= STATUS_REPORT_S
            for node in self.nodes:
                try:
                    node.renew_lease()
                    if report:
                        node.post_status()
                except Exception:
                    log.exception("node %s: heartbeat failed", node.name)
            if report:
                last_status_s = time.monotonic()

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until every node reports Ready and has lost the not-ready taint."""
        for node in self.nodes:
            self.client.wait_for(api_path("v1", "nodes", name=node.name), node_schedulable,
                                 timeout_s=timeout_s, what="Ready and untainted")

    def stop(self) -> None:
        """Stop watches and heartbeats, kill all pod processes, delete the Nodes if asked."""
        self.stop_event.set()
        for node in self.nodes:
            node.stop(self.delete_nodes_on_stop)
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=LEASE_RENEW_S + 5)

    def run_forever(self) -> None:
        """Block until SIGINT/SIGTERM, then stop cleanly."""

        def on_signal(signum: int, _frame: object) -> None:
            self.stop_event.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        try:
            while not self.stop_event.wait(1.0):
                pass
        finally:
            self.stop()


def node_ready(node: Obj) -> bool:
    """Ready condition is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in node.get("status", {}).get("conditions", []))


def node_schedulable(node: Obj) -> bool:
    """Ready, and no not-ready/unreachable taint left by the node lifecycle controller."""
    taints = {t.get("key") for t in node.get("spec", {}).get("taints", []) or []}
    return node_ready(node) and not taints & {"node.kubernetes.io/not-ready",
                                              "node.kubernetes.io/unreachable"}


def container_log(pod: Obj, container: str) -> Path:
    """Newest log file of a container of a pod run by a virtual node (from status.message)."""
    message = str(pod.get("status", {}).get("message", ""))
    prefix = "vnode logs: "
    if not message.startswith(prefix):
        raise ValueError(f"pod {pod['metadata']['name']} was not run by a virtual node "
                         f"(status.message={message!r})")
    return Path(message[len(prefix):]) / f"{container}.log"
