"""Run `edgetrain node-agent` as a real process for tests, and read what it exports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from edgetrain import __version__
from edgetrain.cluster import KubeClient, api_path
from edgetrain.cluster.controlplane import free_ports
from edgetrain.operator.worker_security import restrict
from tests.helpers import http_get


class AgentProcess:
    """One node agent process over a twin root (kill -9 and restart like a crashed pod)."""

    def __init__(self, node: str, root: Path, kubeconfig: Path, state_file: Path, log: Path,
                 port: int | None = None, guard_window_s: float = 1.0,
                 extra: tuple[str, ...] = ()) -> None:
        self.node, self.root, self.kubeconfig = node, root, kubeconfig
        self.state_file, self.log = state_file, log
        self.port = port or free_ports(1)[0]
        self.guard_window_s = guard_window_s
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> AgentProcess:
        argv = [sys.executable, "-m", "edgetrain", "node-agent", "--node-name", self.node,
                "--sysfs-root", str(self.root), "--kubeconfig", str(self.kubeconfig),
                "--state-file", str(self.state_file), "--metrics-address", "127.0.0.1",
                "--metrics-port", str(self.port), "--guard-window-s", str(self.guard_window_s),
                "--tick-s", "0.2", "--sample-interval-s", "0.1", *self.extra]
        env = {k: v for k, v in os.environ.items() if k != "EDGETRAIN_SYSFS_ROOT"}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited {self.proc.returncode}:\n{self.tail()}")
            try:
                if http_get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"agent not ready after {timeout_s} s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, like an OOM-killed or crashed pod."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def metrics(self) -> str:
        return http_get(f"{self.url}/metrics", timeout=5).text


def sample_value(text: str, name: str, **labels: str) -> float | None:
    """The value of the first exposition line of `name` whose labels include `labels`."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        metric, _, rest = head.partition("{")
        if metric != name:
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            return float(value)
    return None


def wait_until(check: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.1,
               ) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval_s)
    raise TimeoutError(f"{what} not reached in {timeout_s} s (last: {last!r})")


SLEEPER_IMAGE = f"ghcr.io/edgetrain/node-agent:{__version__}"


def sleeper_pod(name: str, node: str, seconds: float, freq_hz: int | None = None,
                limit_w: float | None = None, labels: dict[str, str] | None = None,
                ) -> dict[str, Any]:
    """A pod that sleeps on `node`, annotated and confined like an edgetrain training pod
    (Pod Security `restricted`, UID 65532: the agent pins it all the same), from the node
    agent's image (every Jetson that runs the agent holds it)."""
    ann: dict[str, str] = {}
    if freq_hz is not None:
        ann["edgetrain.io/gpu-frequency-hz"] = str(freq_hz)
    if limit_w is not None:
        ann["edgetrain.io/power-limit-watts"] = str(limit_w)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": ann, "labels": labels or {}},
        "spec": restrict({
            "nodeSelector": {"kubernetes.io/hostname": node},
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": SLEEPER_IMAGE,
                            "command": ["/opt/venv/bin/python", "-c",
                                        f"import time; time.sleep({seconds})"]}],
        }, device_group=True),
    }


def events(kube: KubeClient, namespace: str, reason: str) -> list[dict[str, Any]]:
    items = kube.get(api_path("v1", "events", namespace)).get("items", [])
    return [e for e in items if e.get("reason") == reason]
