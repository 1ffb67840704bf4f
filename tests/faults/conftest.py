"""The fault suite's fleet: the session's control plane, a pool of virtual Jetson Nanos of its
own (one agent per node, so a node can lose power alone), and edgetrain installed from the
chart as users install it: two operator replicas with leader election on the session's GPU
server, node agents on the pool. Every fault is recorded for the summary at the end."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from edgetrain.api.keys import ANNOTATION_INJECT_HOLD
from edgetrain.cluster import KubeApiError, KubeClient, LocalCluster, VNodeAgent, api_path
from edgetrain.cluster import container_log as vnode_log
from edgetrain.cluster.controlplane import free_ports
from edgetrain.cluster.nodes import node_specs
from edgetrain.device import GpuDevfreq
from edgetrain.operator.manifests import release_configmap_name
from tests.cluster.fixtures import CHECKPOINT_CLAIM, enforce_pod_security, nfs_claim
from tests.node_agent.helpers import wait_until
from tests.observability.test_chart import CHART, helm
from tests.operator.conftest import job_manifest, patj_path, seed_efficiency

POOL_NODES = 3
# The operator replicas run on two virtual servers of their own, one each: pods of a virtual
# node share its address, and two replicas there would want the same health port.
OPERATOR_NODES = 2
LEASE = {"leaseDurationSeconds": 8, "renewDeadlineSeconds": 5, "retryPeriodSeconds": 1}
# Fine-tune on an MNIST subset: long enough to inject a fault while it trains; the estimate
# (proxy: digits) and the Nano profile are computed once and shared through the caches.
JOB = {"dataset": {"name": "mnist", "limit": 3000},
       "batchSizes": [64], "budget": {"trainSamples": 8192, "evalIntervalSamples": 256}}
CHECKPOINT_INTERVAL = 256  # the trainer checkpoints at every evaluation
# A job's phases in order: a wait for one accepts any later one (it may have passed while the
# test looked elsewhere); Failed counts as later than all, so the caller's assertion says why.
PHASES = ("Pending", "EstimatingEfficiency", "Profiling", "Selecting", "WaitingForPower",
          "Training", "Succeeded", "Failed")


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
class Fleet:
    """What the fault tests act on."""

    kube: KubeClient
    cluster: LocalCluster
    vnodes: VNodeAgent
    ns: str
    pool: str
    agents: dict[str, VNodeAgent]  # the Jetson pool
    op_agents: dict[str, VNodeAgent]  # where the operator replicas run
    work: Path = Path()
    release: str = "faults"
    started: float = field(default_factory=time.monotonic)
    stopped: set[str] = field(default_factory=set)  # pool nodes a test powered off
    held: dict[str, tuple[str, ...]] = field(default_factory=dict)  # job → phases held
    extra: dict[str, VNodeAgent] = field(default_factory=dict)  # add_nanos' agents by label

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
        """SIGKILL the process holding the Lease; (its identity, the kill's monotonic time)."""
        who = self.holder()
        assert who, "no replica holds the Lease"
        sigkill(self.pod_of(who))
        return who, time.monotonic()

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

    def log(self, pod: dict[str, Any]) -> str:
        try:
            return vnode_log(pod, "operator").read_text(errors="replace")
        except (OSError, ValueError) as exc:
            return f"<no log: {exc}>"

    # --- nodes ---

    def rotate_tokens(self, pod: str) -> bool:
        """The kubelet's token rotation, now, for one operator pod."""
        return any(a.rotate_tokens(self.ns, pod) for a in self.op_agents.values())

    def vnode_of(self, pod: dict[str, Any]) -> Any:
        node = pod["spec"]["nodeName"]
        return {**self.agents, **self.op_agents}[node].nodes[0]

    def pool_nodes(self) -> list[str]:
        return sorted(self.agents)

    def add_nanos(self, label: str, count: int = 1, agents: bool = False, **settings: Any
                  ) -> list[str]:
        """More Nanos outside the pool, labelled edgetrain.io/site=<pool>-<label> for a job's
        placement or a budget; their names. `agents`: in the pool's node-agent DaemonSet too.
        `settings`: VNodeAgent's (registry_reachable=False: they cannot pull images)."""
        specs = node_specs({"jetson-nano": count}, prefix=f"{self.pool}-{label}")
        vn = VNodeAgent(self.kube, specs, self.work / label, restart_backoff_s=0.5,
                        max_backoff_s=2.0, cluster_ca=self.cluster.pki, **settings)
        self.extra[label] = vn.start()
        vn.wait_ready()
        labels = {"edgetrain.io/site": f"{self.pool}-{label}",
                  **({"edgetrain.io/pool": self.pool} if agents else {})}
        for spec in specs:
            self.kube.patch(api_path("v1", "nodes", name=spec.name),
                            {"metadata": {"labels": labels}})
        return [spec.name for spec in specs]

    def remove_extra(self) -> None:
        """Stop the nodes `add_nanos` made, delete their Nodes and their pods (no kubelet is
        left to confirm a deletion)."""
        for label in list(self.extra):
            vn = self.extra.pop(label)
            vn.stop()
            for node in vn.specs:
                for pod_ns in (self.ns, self.agent_ns):
                    for pod in self.kube.get(api_path("v1", "pods", pod_ns),
                                             fieldSelector=f"spec.nodeName={node.name}")["items"]:
                        self.kube.delete_ignore_missing(
                            api_path("v1", "pods", pod_ns, pod["metadata"]["name"]),
                            {"apiVersion": "v1", "kind": "DeleteOptions",
                             "gracePeriodSeconds": 0})

    @property
    def agent_ns(self) -> str:
        """The node agents' namespace, which the chart creates (Pod Security `privileged`)."""
        return f"{self.ns}-node-agent"

    def devfreq(self, node: str) -> GpuDevfreq:
        vnode = self.agents[node].nodes[0]
        return GpuDevfreq.discover(vnode.host_root)

    def diagnose(self) -> str:
        out = []
        with_status = self.kube.get(api_path("v1", "pods", self.ns))["items"]
        for pod in with_status:
            st = pod.get("status", {})
            ends = [f"{cs['name']} {json.dumps(cs.get('lastState') or cs.get('state'))}"
                    for cs in st.get("containerStatuses") or []]
            out.append(f"pod {pod['metadata']['name']} on {pod['spec'].get('nodeName')}: "
                       f"{st.get('phase')} {'; '.join(ends)}")
        for pod in self.operator_pods():
            out.append(f"--- {pod['metadata']['name']} log tail ---\n"
                       + "\n".join(self.log(pod).splitlines()[-25:]))
        return "\n".join(out)


def container_pid(pod: dict[str, Any], container: str | None = None) -> int:
    """The local process a virtual node runs for a container (containerID vnode://<pid>)."""
    for cs in pod.get("status", {}).get("containerStatuses", []) or []:
        if container is None or cs["name"] == container:
            cid = str(cs.get("containerID") or "")
            if cid.startswith("vnode://") and "running" in (cs.get("state") or {}):
                return int(cid.removeprefix("vnode://"))
    raise AssertionError(f"pod {pod['metadata']['name']}: no running container")


def sigkill(pod: dict[str, Any], container: str | None = None) -> None:
    """kill -9 a container's processes; its restartPolicy brings it back (as a kubelet does)."""
    os.killpg(container_pid(pod, container), signal.SIGKILL)


@pytest.fixture(scope="module")
def fleet(cluster: LocalCluster, kube: KubeClient, vnodes: VNodeAgent,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Pool nodes, a namespace, and the chart installed there (two operator replicas)."""
    work = tmp_path_factory.mktemp("faults")
    tag = uuid.uuid4().hex[:5]
    ns, pool = f"faults-{tag}", f"faults-{tag}"
    agents: dict[str, VNodeAgent] = {}
    op_agents: dict[str, VNodeAgent] = {}
    for i in range(POOL_NODES + OPERATOR_NODES):
        jetson = i < POOL_NODES
        specs = (node_specs({"jetson-nano": 1}, prefix=f"f{tag}{i}") if jetson
                 else node_specs({}, 1, prefix=f"f{tag}{i}"))
        # The checkpoint claim's NFS export below: writable by the pods' UID 65532.
        agent = VNodeAgent(kube, specs, work / f"vn{i}", restart_backoff_s=0.5,
                           max_backoff_s=2.0, cluster_ca=cluster.pki,
                           shared_dirs=(work / "checkpoints",))
        (agents if jetson else op_agents)[agent.specs[0].name] = agent.start()
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": ns}})
    # The operator's and the jobs' namespace enforces `restricted`, as the README's do, and
    # the jobs checkpoint onto a claim every Jetson shares (a moved job resumes from it).
    enforce_pod_security(kube, ns)
    claim = contextlib.ExitStack()
    claim.enter_context(nfs_claim(kube, ns, work / "checkpoints"))
    fl = Fleet(kube, cluster, vnodes, ns, pool, agents, op_agents, work=work)
    try:
        for name, agent in {**agents, **op_agents}.items():
            agent.wait_ready()
            kube.patch(api_path("v1", "nodes", name=name),
                       {"metadata": {"labels": {"edgetrain.io/pool": pool}}})
        kube.wait_for(api_path("v1", "serviceaccounts", ns, "default"), lambda _sa: True,
                      timeout_s=30, what="default ServiceAccount")
        helm("install", fl.release, str(CHART), "-n", ns, "--wait", "--timeout", "180s",
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
             "--set-json", f'agent.nodeSelector={{"edgetrain.io/pool":"{pool}"}}',
             "--set", f"agent.metrics.port={free_ports(1)[0]}",
             kubeconfig=cluster.kubeconfig)
        fl.kube.wait_for(api_path("coordination.k8s.io/v1", "leases", ns, "edgetrain-operator"),
                         lambda lease: bool(lease["spec"].get("holderIdentity")), timeout_s=60,
                         what="a replica holding the Lease")
        yield fl
    finally:
        # A powered-off node never confirms its pods' deletion, so the uninstall would wait out
        # its timeout for them: its Node goes first and its pods are removed without a kubelet.
        fl.remove_extra()
        for name in fl.stopped:
            kube.delete_ignore_missing(api_path("v1", "nodes", name=name))
            for pod_ns in (ns, fl.agent_ns):
                for pod in kube.get(api_path("v1", "pods", pod_ns),
                                    fieldSelector=f"spec.nodeName={name}")["items"]:
                    kube.delete_ignore_missing(
                        api_path("v1", "pods", pod_ns, pod["metadata"]["name"]),
                        {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
        helm("uninstall", fl.release, "-n", ns, "--wait", "--timeout", "60s",
             kubeconfig=cluster.kubeconfig, check=False)
        kube.delete_ignore_missing(api_path("v1", "namespaces", name=ns))
        claim.close()
        for name, agent in {**agents, **op_agents}.items():
            if name not in fl.stopped:
                agent.stop()
        path = tmp_path_factory.getbasetemp() / "faults-summary.json"
        path.write_text(json.dumps(summary_totals() | {
            "faults": [asdict(r) for r in SUMMARY],
            "wall_s": round(time.monotonic() - fl.started, 1)}, indent=2))
        SUMMARY_FILE[:] = [path]


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
