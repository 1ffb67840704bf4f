"""The fault suite's fleet, every node a real kubelet with containerd (docs/cluster.md, "Faults
on real nodes"): a control plane of its own, three pool Nanos and two GPU servers as
namespaced nodes (edgetrain/cluster/nsnode.py), and edgetrain installed from the chart as users
install it: two operator replicas with leader election, one per server, node agents on the
pool, the jobs' checkpoints on a hostPath volume every node shares. A pod kill is a container
kill and a node loss a power loss of the node (edgetrain/cluster/nsfaults.py). Every fault is
recorded for the summary at the end.

The Nanos are arm64 under QEMU, as a Jetson is and as the README runs them, with the arm64
CPU trainer (1.1 GB). EDGETRAIN_FAULTS_JETSON_ARCH=amd64 runs them natively (labelled as not
emulated), training about six times faster, but with the CPU estimator as their trainer: PyPI
has no CPU-only x86-64 torch, so that image is 7.6 GB with its CUDA libraries, per node."""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from edgetrain import __version__
from edgetrain.api.keys import ANNOTATION_INJECT_HOLD
from edgetrain.api.training import TrainingEvent
from edgetrain.cluster import KubeApiError, KubeClient, LocalCluster, api_path
from edgetrain.cluster.controlplane import free_ports
from edgetrain.cluster.hostnet import claim_network, remove_links
from edgetrain.cluster.jetsons import JetsonFleet, teardown_jetsons
from edgetrain.cluster.nodes import node_specs
from edgetrain.cluster.nsfaults import cut_outside, kill_container, power_off, restart_kubelet
from edgetrain.cluster.nsnode import NsNode
from edgetrain.device import GpuDevfreq
from edgetrain.operator.manifests import release_configmap_name
from tests.cluster.fixtures import CHECKPOINT_CLAIM, enforce_pod_security
from tests.cluster.realnodes import RealCluster, real_cluster, skip_or_fail_without_kubelets
from tests.node_agent.helpers import wait_until
from tests.observability.test_chart import CHART, helm
from tests.operator.conftest import job_manifest, patj_path, seed_efficiency

POOL_NODES = 3
# The operator replicas run on two GPU servers, one each (anti-affinity by hostname): the
# standby must be on another node than the leader whose node a test may take down.
OPERATOR_NODES = 2
LEASE = {"leaseDurationSeconds": 8, "renewDeadlineSeconds": 5, "retryPeriodSeconds": 1}
# Fine-tune on a subset of digits, the set a pod finds in the package (a real node's pods see
# no host data folder): 2,560 samples to the target, 27 s natively on this loaded 2-core host
# (2026-11-27). Holds keep a fault's job where it is to hit. The estimate (proxy: digits) and
# the Nano profile are computed once and shared through the caches.
JOB = {"dataset": {"name": "digits", "limit": 1700},
       "batchSizes": [64], "budget": {"trainSamples": 8192, "evalIntervalSamples": 256}}
CHECKPOINT_INTERVAL = 256  # the trainer checkpoints at every evaluation
# A job's phases in order: a wait for one accepts any later one (it may have passed while the
# test looked elsewhere); Failed counts as later than all, so the caller's assertion says why.
PHASES = ("Pending", "EstimatingEfficiency", "Profiling", "Selecting", "WaitingForPower",
          "Training", "Succeeded", "Failed")
JETSON_ARCH = os.environ.get("EDGETRAIN_FAULTS_JETSON_ARCH", "arm64")
# The trainer for the Nanos' architecture: arm64, the Jetson's CPU variant; amd64, the CPU
# estimator, which carries the same entry points (`edgetrain worker`, the `train` extra).
TRAINER = {"arm64": "trainer-cpu", "amd64": "estimator-cpu"}[JETSON_ARCH]
ESTIMATOR = "estimator-cpu"
NANO_IMAGES = ("node-agent", TRAINER)
# Both servers run an operator replica; the estimate pods go to the first only (the chart's
# serverSelector), the one node that holds the estimator (GBs: PyPI's x86-64 torch brings the
# CUDA libraries, which load and stay unused).
SERVER_IMAGES = ("operator",)
ESTIMATES_LABEL = {"edgetrain.io/estimates": "here"}
NODE_TIMEOUT_S = 900.0  # importing the CPU torch images into a node takes minutes here


@dataclass
class FaultRecord:
    """One injected fault and what it cost."""

    fault: str
    job: str | None = None
    phase_at_fault: str | None = None
    recover_s: float | None = None  # fault → the system acted again (see `detail`)
    final_phase: str | None = None
    lost_samples: int | None = None  # trained before the fault and trained again
    checkpoint_interval: int = CHECKPOINT_INTERVAL
    pins_leaked: int = 0
    expected_phase: str = "Succeeded"  # a probe job fails on purpose
    detail: str = ""


SUMMARY: list[FaultRecord] = []
SUMMARY_FILE: list[Path] = []


@dataclass
class Extra:
    """Nodes `add_nanos` started: a fleet of their own on a slot of their own (a cluster's
    slot holds at most seven namespaced nodes), torn down by `remove_extra`."""

    run_dir: Path
    fleet: JetsonFleet


@dataclass
class Fleet:
    """What the fault tests act on."""

    kube: KubeClient
    real: RealCluster
    ns: str
    pool: str
    pool_names: list[str]  # the Jetson pool
    servers: list[str]  # where the operator replicas run
    work: Path = Path()
    release: str = "faults"
    started: float = field(default_factory=time.monotonic)
    stopped: set[str] = field(default_factory=set)  # pool nodes a test powered off
    held: dict[str, tuple[str, ...]] = field(default_factory=dict)  # job → phases held
    extra: dict[str, Extra] = field(default_factory=dict)  # add_nanos' nodes by label

    @property
    def cluster(self) -> LocalCluster:
        return self.real.cluster

    # --- jobs ---

    def manifest(self, name: str, **spec: Any) -> dict[str, Any]:
        """A job of JOB on the pool, `spec` overriding."""
        return job_manifest(name, **{"placement": {"nodeSelector": {
            "edgetrain.io/pool": self.pool}}, **JOB, **spec})

    def create(self, name: str, hold: tuple[str, ...] = (), **spec: Any) -> str:
        """Create a job of JOB on the pool, `spec` overriding; `hold` phases (estimate, train)
        pause at their first progress line until `release_hold` (the operator's fault
        injection)."""
        manifest = self.manifest(name, **spec)
        if hold:
            manifest["metadata"]["annotations"] = {ANNOTATION_INJECT_HOLD: ",".join(hold)}
        self.held[name] = hold
        deadline = time.monotonic() + 30
        while True:
            try:
                self.kube.create(patj_path(self.ns), manifest)
                return name
            except KubeApiError as exc:  # pooled connections of a restarted API server
                if exc.code not in (0, 429, 500, 503) or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def release_hold(self, name: str, phase: str) -> None:
        """Let a held phase of a job go on (its worker polls for this ConfigMap)."""
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": release_configmap_name(name, phase)}}
        deadline = time.monotonic() + 30
        while True:
            try:
                self.kube.create(api_path("v1", "configmaps", self.ns), body)
                return
            except KubeApiError as exc:
                if exc.code == 409:
                    return
                if exc.code not in (0, 429, 500, 503) or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def status(self, name: str) -> dict[str, Any]:
        obj = self.kube.get_or_none(patj_path(self.ns, name)) or {}
        return dict(obj.get("status") or {})

    def wait(self, name: str, pred: Callable[[dict[str, Any]], bool], what: str,
             timeout_s: float = 300) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                status = self.status(name)
                if pred(status):
                    return status
            except KubeApiError as exc:  # the API server may be restarting
                if exc.code not in (0, 429, 500, 503):
                    raise
                status = {}
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {name}: {what} not reached in {timeout_s:.0f} s; "
                                   f"status {json.dumps(status)[:1500]}\n{self.diagnose()}")
            time.sleep(0.3)

    def wait_done(self, name: str, timeout_s: float = 300) -> dict[str, Any]:
        return self.wait(name, lambda s: s.get("phase") in ("Succeeded", "Failed"),
                         "Succeeded or Failed", timeout_s)

    def wait_phase(self, name: str, phase: str, also: Callable[[], bool] = lambda: True,
                   what: str = "", timeout_s: float = 300) -> dict[str, Any]:
        """`phase` with `also` true, or any later phase (the job did not wait for us)."""
        def reached(s: dict[str, Any]) -> bool:
            at = PHASES.index(s.get("phase") or "Pending")
            return at > PHASES.index(phase) or (at == PHASES.index(phase) and also())

        return self.wait(name, reached, f"{phase}{what} or later", timeout_s)

    def wait_training(self, name: str, timeout_s: float = 300) -> dict[str, Any]:
        """Training, held at its first checkpoint (progress comes at checkpoints). Only a held
        job stays there: without the hold it may finish before the first poll sees it."""
        assert "train" in self.held.get(name, ()), f"job {name}: create it with hold=('train',)"
        return self.wait(name, lambda s: s.get("phase") == "Training"
                         and (s.get("training") or {}).get("samples", 0) > 0,
                         "training held at its first checkpoint", timeout_s)

    def warm_caches(self) -> None:
        """The efficiency vector and Nano profile of JOB in the namespace's caches, so a new
        job of JOB goes straight to training: the walk's, or, when a test runs without the
        walk, a seeded vector and the profile of a job of its own (left to finish)."""
        if self.objects("v1", "configmaps", "edgetrain.io/cache=profile"):
            return
        manifest = job_manifest("warmup", **JOB)
        seed_efficiency(self.kube, self.ns, manifest["spec"], (2048.0,))  # tested elsewhere
        self.create("warmup")  # it trains on in the pool and Succeeds (test_no_job_lost…)
        wait_until(lambda: self.objects("v1", "configmaps", "edgetrain.io/cache=profile"),
                   600, "the warm-up's profile", interval_s=0.5)

    def objects(self, api_version: str, plural: str, selector: str) -> list[dict[str, Any]]:
        return list(self.kube.get(api_path(api_version, plural, self.ns),
                                  labelSelector=selector)["items"])

    def events(self, name: str) -> list[dict[str, Any]]:
        """The Events on one object of the namespace."""
        items = self.kube.get(api_path("v1", "events", self.ns))["items"]
        return [e for e in items if e["involvedObject"].get("name") == name]

    def reasons(self, name: str, expect: tuple[str, ...] = (),
                timeout_s: float = 30.0) -> list[str]:
        """The reasons of the object's Events (each as often as it was counted), once every
        one of `expect` is among them or after `timeout_s`: the operator posts a job's keyed
        Events after the write that decides, retried until they exist."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = [e["reason"] for e in self.events(name)
                   for _ in range(int(e.get("count") or 1))]
            if all(r in got for r in expect) or time.monotonic() > deadline:
                return got
            time.sleep(0.5)

    def resumed_from(self, name: str) -> int:
        """Where the last training segment started (the trainer's result, via the worker)."""
        cm = self.kube.get(api_path("v1", "configmaps", self.ns, f"{name}-progress"))
        return int(json.loads(cm["data"]["result.json"])["resumed_from_samples"])

    # --- the operator replicas and the Lease ---

    def lease(self) -> dict[str, Any]:
        return self.kube.get(api_path("coordination.k8s.io/v1", "leases", self.ns,
                                      "edgetrain-operator"))

    def holder(self) -> str:
        try:
            return str(self.lease()["spec"].get("holderIdentity") or "")
        except KubeApiError:
            return ""

    def operator_pods(self) -> list[dict[str, Any]]:
        return self.objects("v1", "pods", "app.kubernetes.io/component=operator")

    def pod_of(self, identity: str) -> dict[str, Any]:
        pod_name = identity.rsplit("_", 1)[0]
        return self.kube.get(api_path("v1", "pods", self.ns, pod_name))

    def kill_leader(self) -> tuple[str, float]:
        """SIGKILL the container holding the Lease; (its identity, the kill's monotonic time)."""
        who = self.holder()
        assert who, "no replica holds the Lease"
        self.kill(self.pod_of(who))
        return who, time.monotonic()

    def kill(self, pod: dict[str, Any], container: str | None = None) -> int:
        """kill -9 a running container's process on its node (the kubelet restarts it per the
        pod's restartPolicy); its pid."""
        for cs in pod.get("status", {}).get("containerStatuses", []) or []:
            if (container is None or cs["name"] == container) and "running" in (
                    cs.get("state") or {}):
                return kill_container(self.node(pod["spec"]["nodeName"]), cs["containerID"])
        raise AssertionError(f"pod {pod['metadata']['name']}: no running container")

    def wait_new_holder(self, old: str, since: float, timeout_s: float = 60) -> float:
        """Seconds from `since` until a replica other than `old` holds the Lease."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            who = self.holder()
            if who and who != old:
                return time.monotonic() - since
            time.sleep(0.2)
        raise TimeoutError(f"no replica took over the Lease from {old} in {timeout_s} s\n"
                           f"{self.diagnose()}")

    def log(self, pod: dict[str, Any], container: str = "operator") -> str:
        """A container's log, from its kubelet (`kubectl logs`)."""
        meta = pod["metadata"]
        try:
            return self.kube.get_text(api_path("v1", "pods", meta["namespace"], meta["name"],
                                               "log") + f"?container={container}")
        except (KubeApiError, OSError) as exc:
            return f"<no log: {exc}>"

    # --- nodes ---

    def node(self, name: str) -> NsNode:
        """A real node of the fleet or of `add_nanos`."""
        for fleet in (self.real.fleet, *(e.fleet for e in self.extra.values())):
            for node in fleet.nodes:
                if node.name == name:
                    return node
        raise KeyError(f"no real node {name} in the fault fleet")

    def rotate_tokens(self, pod: str) -> bool:
        """Make the kubelet of the operator pod's node rotate its tokens now: a restarted
        kubelet has none cached and requests new ones (its containers run on)."""
        obj = self.kube.get(api_path("v1", "pods", self.ns, pod))
        restart_kubelet(self.node(obj["spec"]["nodeName"]))
        return True

    def pool_nodes(self) -> list[str]:
        return sorted(self.pool_names)

    def add_nanos(self, label: str, count: int = 1, agents: bool = False,
                  registry_reachable: bool = True, trainer: bool = True) -> list[str]:
        """More Nanos outside the pool, labelled edgetrain.io/site=<pool>-<label> for a job's
        placement or a budget; their names. `agents`: in the pool's node-agent DaemonSet too.
        `registry_reachable=False`: without the trainer image and with no route out, so the
        worker's image cannot be pulled. `trainer=False`: nodes that run no worker need not
        hold its image (a GB under arm64)."""
        specs = node_specs({"jetson-nano": count}, prefix=f"{self.pool}-{label}")
        run_dir = self.work / f"extra-{label}"
        net = claim_network()
        fleet = JetsonFleet(run_dir, net, self.cluster.ports["apiserver"], JETSON_ARCH)
        self.extra[label] = Extra(run_dir, fleet)  # remove_extra tears down what started
        fleet.start(specs, self.kube, NANO_IMAGES if registry_reachable and trainer
                    else ("node-agent",),
                    __version__, NODE_TIMEOUT_S, lambda _m: None,
                    shared_dirs=(str(self.work / "checkpoints"),))
        if not registry_reachable:
            for node in fleet.nodes:
                cut_outside(node)
        labels = {"edgetrain.io/site": f"{self.pool}-{label}",
                  **({"edgetrain.io/pool": self.pool} if agents else {})}
        for spec in specs:
            self.kube.patch(api_path("v1", "nodes", name=spec.name),
                            {"metadata": {"labels": labels}})
        return [spec.name for spec in specs]

    def remove_extra(self) -> None:
        """Stop the nodes `add_nanos` made, then delete their Nodes and their pods (no kubelet
        is left to confirm a deletion)."""
        for label in list(self.extra):
            extra = self.extra.pop(label)
            names = [n.name for n in extra.fleet.nodes]
            teardown_jetsons(extra.run_dir)
            remove_links(extra.fleet.net)
            for name in names:
                self.forget_node(name)

    def forget_node(self, name: str) -> None:
        """Delete a Node whose kubelet is gone, and its pods without waiting for it."""
        self.kube.delete_ignore_missing(api_path("v1", "nodes", name=name))
        for pod_ns in (self.ns, self.agent_ns):
            for pod in self.kube.get(api_path("v1", "pods", pod_ns),
                                     fieldSelector=f"spec.nodeName={name}")["items"]:
                self.kube.delete_ignore_missing(
                    api_path("v1", "pods", pod_ns, pod["metadata"]["name"]),
                    {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})

    def power_off(self, name: str) -> None:
        """A pool node loses power (its kubelet, containerd and containers die at once)."""
        power_off(self.node(name))
        self.stopped.add(name)

    @property
    def agent_ns(self) -> str:
        """The node agents' namespace, which the chart creates (Pod Security `privileged`)."""
        return f"{self.ns}-node-agent"

    def devfreq(self, node: str) -> GpuDevfreq:
        """The node's GPU, in its device twin's tree (what the node mounts as its /sys)."""
        return GpuDevfreq.discover(self.node(node).dir / "twin")

    def state_file(self, node: str) -> Path:
        """The node agent's pin state (the chart's hostPath /var/lib/edgetrain on the node)."""
        return self.node(node).dir / "edgetrain" / "node-agent-state.json"

    def pod_file(self, pod: dict[str, Any], path: str) -> Path:
        """A file of the pod's node as the node sees it (a volume the kubelet mounted in the
        node's mount namespace is not in the host's view of the node's directory)."""
        node = self.node(pod["spec"]["nodeName"])
        return Path(f"/proc/{node.procs['ns'].pid}/root") / path.lstrip("/")

    def train_progress(self, node: str, job: str) -> list[TrainingEvent]:
        """The progress lines a job's first training pod wrote on `node` (its container logs
        stay on the node's disk, in the CRI's format: time, stream, tag, line)."""
        events = []
        logs = self.node(node).dir / "log" / "pods"
        for log in logs.glob(f"{self.ns}_{job}-train-1-*/*/*.log"):
            for line in log.read_text(errors="replace").splitlines():
                parts = line.split(" ", 3)
                event = TrainingEvent.from_line(parts[3]) if len(parts) == 4 else None
                if event is not None:
                    events.append(event)
        return events

    def diagnose(self) -> str:
        out = []
        with_status = self.kube.get(api_path("v1", "pods", self.ns))["items"]
        for pod in with_status:
            st = pod.get("status", {})
            out.append(f"pod {pod['metadata']['name']} on {pod['spec'].get('nodeName')}: "
                       f"{st.get('phase')}")
        for pod in self.operator_pods():
            out.append(f"--- {pod['metadata']['name']} log tail ---\n"
                       + "\n".join(self.log(pod).splitlines()[-25:]))
        return "\n".join(out)


def hostpath_claim_manifests(namespace: str, path: Path, claim: str = CHECKPOINT_CLAIM,
                             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ReadWriteMany PV of a hostPath every node shares, and the claim bound to it."""
    pv_name = f"{claim}-{namespace}-{uuid.uuid4().hex[:5]}"[-253:]
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
          "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                   "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                   "claimRef": {"namespace": namespace, "name": claim},
                   "hostPath": {"path": str(path), "type": "Directory"}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": claim, "namespace": namespace},
           "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                    "volumeName": pv_name, "resources": {"requests": {"storage": "1Gi"}}}}
    return pv, pvc


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """A control plane, pool Nanos and servers as real nodes, a namespace, and the chart
    installed there (two operator replicas)."""
    skip_or_fail_without_kubelets()
    work = tmp_path_factory.mktemp("faults")
    tag = uuid.uuid4().hex[:5]
    ns, pool = f"faults-{tag}", f"faults-{tag}"
    # Every node sees it at this path, read-write; the workers write it as UID 65532.
    shared = work / "checkpoints"
    shared.mkdir()
    shared.chmod(0o777)
    specs = [*node_specs({"jetson-nano": POOL_NODES}, prefix=f"f{tag}"),
             *node_specs({}, OPERATOR_NODES, prefix=f"f{tag}")]
    with real_cluster(work / "c", specs, JETSON_ARCH, NANO_IMAGES, NODE_TIMEOUT_S,
                      server_images=SERVER_IMAGES, shared_dirs=(str(shared),)) as real:
        kube = real.kube
        names = [s.name for s in specs]
        real.import_images(names[POOL_NODES], (ESTIMATOR,), "linux/amd64")
        missing = real.missing_images()
        assert not missing, f"images podman lacks (`make images-local` builds them): {missing}"
        fl = Fleet(kube, real, ns, pool, names[:POOL_NODES], names[POOL_NODES:], work=work)
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": ns}})
        # The operator's and the jobs' namespace enforces `restricted`, as the README's do,
        # and the jobs checkpoint onto a claim every Jetson shares (a moved job resumes
        # from it).
        enforce_pod_security(kube, ns)
        pv, pvc = hostpath_claim_manifests(ns, shared)
        kube.create("/api/v1/persistentvolumes", pv)
        try:
            kube.create(api_path("v1", "persistentvolumeclaims", ns), pvc)
            for name in names:
                # The servers opt out of the node agents, as the chart says a non-Jetson does.
                opt_out = {} if name in fl.pool_names else {"edgetrain.io/node-agent": "disabled"}
                estimates = ESTIMATES_LABEL if name == names[POOL_NODES] else {}
                kube.patch(api_path("v1", "nodes", name=name), {"metadata": {"labels": {
                    "edgetrain.io/pool": pool, **opt_out, **estimates}}})
            kube.wait_for(api_path("v1", "serviceaccounts", ns, "default"), lambda _sa: True,
                          timeout_s=30, what="default ServiceAccount")
            _install(fl)
            yield fl
        finally:
            _uninstall(fl)
            kube.delete_ignore_missing(api_path("v1", "persistentvolumes",
                                                name=pv["metadata"]["name"]))
            path = tmp_path_factory.getbasetemp() / "faults-summary.json"
            path.write_text(json.dumps(summary_totals() | {
                "faults": [asdict(r) for r in SUMMARY], "jetson_arch": JETSON_ARCH,
                "wall_s": round(time.monotonic() - fl.started, 1)}, indent=2))
            SUMMARY_FILE[:] = [path]


def _install(fl: Fleet) -> None:
    """The chart, as users install it, with the fleet's images and fast settings."""
    ns, pool = fl.ns, fl.pool
    helm("install", fl.release, str(CHART), "-n", ns, "--wait", "--timeout", "170s",
         "--set", "operator.replicas=2",
         *[a for k, v in LEASE.items()
           for a in ("--set-json", f"operator.leaderElection.{k}={v}")],
         "--set-json", f'operator.nodeSelector={{"edgetrain.io/pool":"{pool}",'
                       '"edgetrain.io/node-kind":"server"}',
         "--set-json", "operator.affinity=" + json.dumps({"podAntiAffinity": {
             "requiredDuringSchedulingIgnoredDuringExecution": [{
                 "topologyKey": "kubernetes.io/hostname",
                 "labelSelector": {"matchLabels": {
                     "app.kubernetes.io/component": "operator"}}}]}}),
         "--set", f"operator.settings.namespaces={{{ns}}}",
         "--set-json", f"operator.settings.serverSelector={json.dumps(ESTIMATES_LABEL)}",
         # The chart gives the job namespace its worker identity (the operator makes none).
         "--set", f"worker.namespaces={{{ns}}}",
         "--set", f"operator.settings.checkpointPvc={CHECKPOINT_CLAIM}",
         "--set-json", "operator.settings.pollIntervalSeconds=1",
         "--set-json", "operator.settings.retryBackoffSeconds=1",
         "--set-json", "operator.settings.progressIntervalSeconds=0.5",
         "--set-json", "operator.extraEnv=" + json.dumps([
             {"name": "EDGETRAIN_OPERATOR_PROFILE_MIN_WINDOW_S", "value": "0.3"},
             {"name": "EDGETRAIN_OPERATOR_PROFILE_STABILIZE_WINDOW_S", "value": "0.3"},
             # edgetrain.io/inject-hold: tests hold a job where the fault is to hit.
             {"name": "EDGETRAIN_OPERATOR_FAULT_INJECTION", "value": "true"}]),
         # The images the nodes hold (imported from podman; nothing can be pulled here).
         "--set", f"images.estimator.repository={ESTIMATOR}",
         "--set-json", 'images.estimator.platforms=["linux/amd64"]',
         "--set", f"images.trainer.repository={TRAINER}",
         "--set-json", f'images.trainer.platforms=["linux/{JETSON_ARCH}"]',
         # The pool's Nanos, whatever their architecture (the chart's default selects arm64).
         "--set-json", 'agent.nodeSelector={"kubernetes.io/arch":null,'
                       f'"edgetrain.io/pool":"{pool}"}}',
         "--set", f"agent.metrics.port={free_ports(1)[0]}",
         kubeconfig=fl.cluster.kubeconfig)
    fl.kube.wait_for(api_path("coordination.k8s.io/v1", "leases", ns, "edgetrain-operator"),
                     lambda lease: bool(lease["spec"].get("holderIdentity")), timeout_s=60,
                     what="a replica holding the Lease")


def _uninstall(fl: Fleet) -> None:
    """A powered-off node never confirms its pods' deletion, so the uninstall would wait out
    its timeout for them: its Node goes first and its pods are removed without a kubelet."""
    with contextlib.suppress(KubeApiError, OSError):
        fl.remove_extra()
    for name in fl.stopped:
        fl.forget_node(name)
    helm("uninstall", fl.release, "-n", fl.ns, "--wait", "--timeout", "60s",
         kubeconfig=fl.cluster.kubeconfig, check=False)
    fl.kube.delete_ignore_missing(api_path("v1", "namespaces", name=fl.ns))


def summary_totals() -> dict[str, Any]:
    """Faults injected, jobs lost, pins leaked, seconds to recover (max)."""
    jobs = {r.job: (r.final_phase, r.expected_phase) for r in SUMMARY if r.job}
    recover = [r.recover_s for r in SUMMARY if r.recover_s is not None]
    return {"faults_injected": len(SUMMARY),
            "jobs": len(jobs),
            "jobs_lost": sum(1 for phase, want in jobs.values() if phase != want),
            "pins_leaked": sum(r.pins_leaked for r in SUMMARY),
            "max_recover_s": round(max(recover), 1) if recover else None}


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The fault table after the run (when the suite ran)."""
    if not SUMMARY:
        return
    tr = terminalreporter
    tr.section("fault suite")
    tr.write_line(f"{'fault':<44} {'job':<14} {'phase':<21} {'recover s':>9} {'final':<10} "
                  f"{'lost':>5} {'pins':>4}")
    for r in SUMMARY:
        rec = "" if r.recover_s is None else f"{r.recover_s:.1f}"
        lost = "" if r.lost_samples is None else str(r.lost_samples)
        tr.write_line(f"{r.fault:<44} {r.job or '':<14} {r.phase_at_fault or '':<21} {rec:>9} "
                      f"{r.final_phase or '':<10} {lost:>5} {r.pins_leaked:>4}")
    totals = summary_totals()
    tr.write_line(", ".join(f"{k} {v}" for k, v in totals.items())
                  + f" (lost: samples trained again, checkpoint interval {CHECKPOINT_INTERVAL})")
    if SUMMARY_FILE:
        tr.write_line(f"summary: {SUMMARY_FILE[0]}")
