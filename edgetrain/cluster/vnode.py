"""Virtual nodes: an agent that registers Nodes with Jetson labels, keeps their Leases fresh
and runs the pods bound to them as local processes (see node.py, runtime.py, volumes.py and
pod_status.py for the parts)."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from edgetrain.api.pod_security import DEFAULT_CHECKPOINT_DIR, WORKER_GID, WORKER_UID
from edgetrain.cluster.node import LOOPBACK, VirtualNode
from edgetrain.cluster.nodes import VNodeSpec
from edgetrain.cluster.pki import Pki
from edgetrain.cluster.runtime import default_executables
from edgetrain.cluster.twin import TwinFactory, default_twin_factory
from edgetrain.kube import KubeClient, api_path, node_schedulable, now_rfc3339, wait_for_stop_signal

log = logging.getLogger("edgetrain.vnode")

LEASE_RENEW_S = 10.0
STATUS_REPORT_S = 60.0


def prepare_shared_dir(path: Path, uid: int = WORKER_UID, gid: int = WORKER_GID) -> None:
    """A host directory every virtual node's pods share (the operator's checkpoint root: the
    storage a PVC would be elsewhere), owned by the worker UID as fsGroup makes a volume:
    pods running as it create their folders there. Idempotent; as non-root, only created."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, uid, gid)
        path.chmod(0o2770)


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
    # False: a node cut off from its registry with no image cached (an edge fault): every
    # container waits in ErrImagePull / ImagePullBackOff, as a kubelet's would.
    registry_reachable: bool = True
    # `edgetrain …` containers fork from one interpreter that imported torch and the CLI
    # (cluster/forkserver.py); False starts each as a new process, as a kubelet would.
    preload_pods: bool = True
    # The cluster's CA: kubelet serving certs are signed with it and only API-server client
    # certs it signed may read logs. None (a foreign cluster): self-signed, any TLS client.
    cluster_ca: Pki | None = None
    # Host directories the pods share (the operator's checkpoint root), prepared for the
    # worker UID at start: where that fails (not root) a warning says so.
    shared_dirs: Sequence[Path] = (Path(DEFAULT_CHECKPOINT_DIR),)
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
        for path in self.shared_dirs:
            try:
                prepare_shared_dir(path)
            except OSError as exc:
                log.warning("shared directory %s not prepared for UID %d: %s (training pods"
                            " need a checkpoint PVC or another writable root)", path,
                            WORKER_UID, exc.strerror or exc)
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

    def rotate_tokens(self, namespace: str, pod: str) -> bool:
        """Renew the projected ServiceAccount tokens of one running pod now (the kubelet's
        rotation, brought forward); False if no node here runs that pod."""
        for node in self.nodes:
            with node._lock:
                runner = next((r for r in node.runners.values()
                               if r.namespace == namespace and r.pod_name == pod), None)
            if runner is not None:
                runner.rotate_tokens()
                return True
        return False

    def stop(self) -> None:
        """Stop watches and heartbeats, kill all pod processes, delete the Nodes if asked."""
        self.stop_event.set()
        for node in self.nodes:
            node.stop(self.delete_nodes_on_stop)
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=LEASE_RENEW_S + 5)

    def run_forever(self) -> None:
        """Block until SIGINT/SIGTERM, then stop cleanly."""
        try:
            wait_for_stop_signal(self.stop_event)
        finally:
            self.stop()
