"""One virtual node: its Node object (labels, capacity, addresses), Lease and heartbeat
status, device twin, kubelet log endpoint and the pod runners of the pods bound to it."""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import uuid
from pathlib import Path

from edgetrain.api.keys import ANNOTATION_VNODE_DIR
from edgetrain.api.pod_security import JETSON_DEVICE_GID
from edgetrain.cluster import binaries
from edgetrain.cluster.kubelet import AddressClaim, ContainerLog, KubeletServer
from edgetrain.cluster.nodes import VNODE_RUNTIME, AgentSettings, VNodeSpec, node_specs
from edgetrain.cluster.pki import issue_serving_pair
from edgetrain.cluster.runtime import PodRunner
from edgetrain.cluster.twin import Twin, share_with_group
from edgetrain.kube import KubeApiError, Obj, api_path, now_micro, now_rfc3339

log = logging.getLogger("edgetrain.vnode")

LOOPBACK = "127.0.0.1"
LEASE_DURATION_S = 40

__all__ = ["LOOPBACK", "VNodeSpec", "VirtualNode", "node_specs"]


class VirtualNode:
    """One Node object, its Lease, its device twin and its pod runners."""

    def __init__(self, agent: AgentSettings, spec: VNodeSpec) -> None:
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
    def runtime(self) -> str:
        """No container runtime: pods are local processes of the agent."""
        return VNODE_RUNTIME

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
            share_with_group(self.twin.root, JETSON_DEVICE_GID)
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
                "labels": prof.labels(self.name, self.spec.bare),
                "annotations": {**prof.annotations(self.spec.bare),
                                ANNOTATION_VNODE_DIR: str(self.dir),
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
                "containerRuntimeVersion": VNODE_RUNTIME,
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

    def stop(self, delete_node: bool = True) -> None:
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
