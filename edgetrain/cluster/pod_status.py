"""What a virtual node reports about its pods: readiness probes, pod conditions and the
status subresource (phase, container states, addresses, where the logs are)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from edgetrain.cluster.kubelet import http_probe
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path, now_rfc3339

if TYPE_CHECKING:
    from edgetrain.cluster.container import Container
    from edgetrain.cluster.nodes import PodHost

PROBE_PERIOD_MAX_S = 2.0
log = logging.getLogger("edgetrain.vnode")


class PodStatus:
    """Probing and status reporting of a PodRunner (mixin: the state lives on the runner)."""

    node: PodHost
    namespace: str
    pod_name: str
    inits: list[Container]
    mains: list[Container]
    _conditions: dict[str, Obj]
    _last_status: Obj | None
    _start_time: str
    _phase: str
    _status_warned_at: float = float("-inf")

    if TYPE_CHECKING:
        @property
        def client(self) -> KubeClient: ...

        @property
        def log_dir(self) -> Path: ...

        def shutdown(self) -> None: ...

    def _probe(self, c: Container) -> None:
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

    def _report(self, phase: str) -> bool:
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
        return self._patch_status(phase=phase)

    def _patch_status(self, phase: str, reason: str = "", message: str = "") -> bool:
        """Send the pod's status; False if the API server could not take it now (it is sent
        again at the next tick: a kubelet keeps its pods running through API outages)."""
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
            return True
        path = api_path("v1", "pods", self.namespace, self.pod_name, "status")
        try:
            self.client.patch(path, {"status": status}, "strategic")
        except KubeApiError as exc:
            if exc.code == 404:
                self.shutdown()  # force-deleted: nothing to report to any more
                return True
            if exc.code in (0, 429) or exc.code >= 500:
                now = time.monotonic()
                if now >= self._status_warned_at + 30:
                    log.warning("pod %s/%s: status not reported (%s); retrying",
                                self.namespace, self.pod_name, exc)
                    self._status_warned_at = now
                return False
            raise
        self._last_status = status
        self._phase = phase
        return True


def container_log(pod: Obj, container: str) -> Path:
    """Newest log file of a container of a pod run by a virtual node (from status.message)."""
    message = str(pod.get("status", {}).get("message", ""))
    prefix = "vnode logs: "
    if not message.startswith(prefix):
        raise ValueError(f"pod {pod['metadata']['name']} was not run by a virtual node "
                         f"(status.message={message!r})")
    return Path(message[len(prefix):]) / f"{container}.log"
