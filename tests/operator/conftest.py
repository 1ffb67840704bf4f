"""Operator fixtures: the session's real control plane and real nodes (tests/cluster), the
CRDs applied once, and one `edgetrain operator` process shared by every end-to-end test: the
operator runs on the host, its estimate, profile and train pods on the nodes, from the CPU
images the nodes hold (imported from podman: nothing is pulled here)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgetrain import __version__
from edgetrain.api import EfficiencyVector
from edgetrain.api.crd import CRD_NAME, PLURAL, VERSION
from edgetrain.api.job import PowerAwareTrainingJobSpec, efficiency_cache_key
from edgetrain.cluster import KubeApiError, KubeClient, LocalCluster, api_path, binaries
from edgetrain.operator import manifests as mf
from tests.cluster.fixtures import (
    CHECKPOINT_CLAIM,
    ESTIMATES_LABEL,
    ESTIMATOR,
    JETSON_ARCH,
    TRAINER,
    enforce_pod_security,
    hostpath_claim,
    temporary_namespace,
)
from tests.cluster.realnodes import RealCluster

GROUP_VERSION = f"edgetrain.io/{VERSION}"


CHART = Path(__file__).resolve().parents[2] / "charts" / "edgetrain"
PLURALS = {"ClusterRole": "clusterroles", "ServiceAccount": "serviceaccounts",
           "RoleBinding": "rolebindings"}


def enable_workers(kube: KubeClient, namespace: str) -> None:
    """What `helm upgrade --set worker.namespaces={ns}` adds: the chart's worker ServiceAccount
    and RoleBinding in `namespace` (the operator creates no RBAC), applied from the chart."""
    out = subprocess.run(
        [str(binaries.bin_dir() / "helm"), "template", "edgetrain", str(CHART),
         "--show-only", "templates/worker-rbac.yaml",
         "--kube-version", binaries.K8S_VERSION.lstrip("v"),
         "--set", f"worker.namespaces={{{namespace}}}"],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for doc in yaml.safe_load_all(out.stdout):
        if doc:
            kube.apply(doc, PLURALS[doc["kind"]])


@contextlib.contextmanager
def job_namespace(kube: KubeClient, ns: str, checkpoints: Path) -> Iterator[str]:
    """Make `ns` a job namespace as the README's is: enabled for workers the way the chart
    does it, enforcing Pod Security `restricted` as a cluster admin's job namespaces would
    (every worker pod is admitted under it, or its job never gets past its phase), with the
    checkpoint claim on the directory every node shares."""
    enable_workers(kube, ns)
    enforce_pod_security(kube, ns)
    with hostpath_claim(kube, ns, checkpoints, wait=False):
        yield ns


@pytest.fixture(autouse=True)
def _workers_enabled(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test's own namespace is a job namespace (`job_namespace`)."""
    if "namespace" not in request.fixturenames:
        yield
        return
    with job_namespace(request.getfixturevalue("kube"), request.getfixturevalue("namespace"),
                       request.getfixturevalue("checkpoint_root")):
        yield


def patj_path(namespace: str, name: str | None = None, sub: str | None = None) -> str:
    """REST path of PowerAwareTrainingJobs."""
    return api_path(GROUP_VERSION, PLURAL, namespace, name, sub)


@pytest.fixture(scope="session")
def crds(kube: KubeClient, repo_root: Path) -> None:
    """Apply the committed CRDs (what `kubectl apply -f crds/` does) and wait until served."""
    for path in sorted((repo_root / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            kube.apply(doc, "customresourcedefinitions")
    kube.wait_for(
        api_path("apiextensions.k8s.io/v1", "customresourcedefinitions", name=CRD_NAME),
        lambda crd: any(c["type"] == "Established" and c["status"] == "True"
                        for c in (crd.get("status") or {}).get("conditions") or []),
        timeout_s=30, what="CRD Established")
    # A fresh CRD's storage may answer 404/429 for a moment.
    deadline = time.monotonic() + 30
    while True:
        try:
            kube.get(api_path(GROUP_VERSION, PLURAL))
            break
        except KubeApiError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


@dataclass
class OperatorProcess:
    """The `edgetrain operator` subprocess and its log."""

    proc: subprocess.Popen[bytes]
    log: Path
    checkpoints: Path
    metrics_url: str = ""  # its Prometheus /metrics (the PowerBudget gauges)

    def rss_bytes(self) -> int:
        """Resident memory of the operator process."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def log_text(self) -> str:
        """Everything it logged so far."""
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="session")
def operator(
    cluster: LocalCluster, crds: None, trainer_images: RealCluster,
    tmp_path_factory: pytest.TempPathFactory, checkpoint_root: Path,
) -> Iterator[OperatorProcess]:
    """One operator for the session: fast polling and retries, fault injection enabled, the
    images the nodes hold (an estimate needs the `estimator_image` fixture too)."""
    from edgetrain.cluster.controlplane import free_ports

    work = tmp_path_factory.mktemp("operator")
    log = work / "operator.log"
    metrics_port = free_ports(1)[0]
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "EDGETRAIN_OPERATOR_POLL_INTERVAL_S": "1",
        "EDGETRAIN_OPERATOR_RETRY_BACKOFF_S": "1",
        "EDGETRAIN_OPERATOR_RETRY_LIMIT": "2",
        "EDGETRAIN_OPERATOR_FAULT_INJECTION": "true",
        # Training pods mount the namespace's claim there (the default mount path).
        "EDGETRAIN_OPERATOR_CHECKPOINT_PVC": CHECKPOINT_CLAIM,
        "EDGETRAIN_OPERATOR_PROGRESS_INTERVAL_S": "0.5",
        # A profile point in about 1 s of training, not 3 (docs/workloads.md, `profile`).
        "EDGETRAIN_OPERATOR_PROFILE_MIN_WINDOW_S": "0.3",
        "EDGETRAIN_OPERATOR_PROFILE_STABILIZE_WINDOW_S": "0.3",
        # A job whose placement matches no Ready node fails after this (300 s by default).
        "EDGETRAIN_OPERATOR_NO_NODE_GRACE_S": "5",
        "EDGETRAIN_OPERATOR_METRICS_PORT": str(metrics_port),
        "EDGETRAIN_OPERATOR_ESTIMATOR_IMAGE": f"ghcr.io/edgetrain/{ESTIMATOR}:{__version__}",
        "EDGETRAIN_OPERATOR_ESTIMATOR_PLATFORMS": "linux/amd64",
        "EDGETRAIN_OPERATOR_TRAINER_IMAGE": f"ghcr.io/edgetrain/{TRAINER}:{__version__}",
        "EDGETRAIN_OPERATOR_TRAINER_PLATFORMS": f"linux/{JETSON_ARCH}",
        "EDGETRAIN_OPERATOR_SERVER_SELECTOR": ",".join(
            f"{k}={v}" for k, v in ESTIMATES_LABEL.items()),
        # A restricted pod's /sys is read-only on a real node: profile pods ask the node
        # agent for each clock (`chart_agents` runs the chart's agents), as the chart sets it.
        "EDGETRAIN_OPERATOR_PROFILE_CLOCKS_BY_AGENT": "true",
        # The suite's threads per PyTorch process (the Makefile's OMP_NUM_THREADS=1) in the
        # workload pods too: several run at once on the nodes, which share this host's cores.
        "EDGETRAIN_OPERATOR_WORKER_THREADS": os.environ.get("OMP_NUM_THREADS", "none"),
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "edgetrain", "operator", "--verbose"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    op = OperatorProcess(proc, log, checkpoint_root,
                         f"http://127.0.0.1:{metrics_port}/metrics")
    try:
        deadline = time.monotonic() + 60
        while "Initial authentication has finished" not in op.log_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"operator did not start:\n{op.log_text()[-3000:]}")
            time.sleep(0.2)
        yield op
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_phase(kube: KubeClient, ns: str, name: str, phases: set[str], timeout_s: float,
               op: OperatorProcess | None = None) -> dict[str, Any]:
    """Poll until status.phase is one of `phases`; on timeout show status and operator log."""
    try:
        return kube.wait_for(patj_path(ns, name),
                             lambda o: o.get("status", {}).get("phase") in phases,
                             timeout_s=timeout_s, interval_s=0.5, what=f"phase in {phases}")
    except TimeoutError as exc:
        tail = op.log_text()[-4000:] if op else ""
        raise TimeoutError(f"{exc}\noperator log tail:\n{tail}") from None


def explain_job(kube: KubeClient, ns: str, name: str) -> str:
    """Why a job ended as it did: its conditions, the namespace's last Events, and each pod's
    state and log tail (for an assertion's message; read only when it fails)."""
    job = kube.get(patj_path(ns, name))
    lines = ["conditions:", *(json.dumps(c) for c in job.get("status", {}).get("conditions", []))]
    events = kube.get(api_path("v1", "events", ns))["items"]
    events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    lines += ["events:", *(f"{e['involvedObject']['name']}: {e['reason']}: {e.get('message')}"
                           for e in events[-20:])]
    for pod in kube.get(api_path("v1", "pods", ns))["items"]:
        pod_name = pod["metadata"]["name"]
        states = [json.dumps(c.get("state")) for c in pod.get("status", {}).get(
            "containerStatuses", [])]
        lines.append(f"pod {pod_name} on {pod['spec'].get('nodeName')}: {states}")
        try:
            lines.append(kube.get_text(api_path("v1", "pods", ns, pod_name, "log")
                                       + "?tailLines=15&timestamps=false"))
        except KubeApiError as exc:
            lines.append(f"(no log: {exc})")
    return "\n".join(lines)


def job_manifest(name: str, **spec: Any) -> dict[str, Any]:
    """A small, fast job: quarter-width ResNet-8 on digits on the session's Jetson Nano."""
    body: dict[str, Any] = {
        "model": {"architecture": "resnet8-w025"},
        "dataset": {"name": "digits"},
        "proxyDataset": {"name": "digits"},
        "targetAccuracy": 0.5,
        "powerLimitWatts": 5,
        "batchSizes": [16, 64],
        "gpuFrequenciesHz": [307200000, 921600000],
        "optimizer": {"name": "adam", "learningRate": 3.0e-3, "referenceBatchSize": 64},
        "placement": {"nodeSelector": {"edgetrain.io/device-model": "jetson-nano"}},
        # One estimate seed: the cluster tests time the operator, not the estimate's merge.
        "budget": {"estimateSamples": 2048, "trainSamples": 4096, "evalIntervalSamples": 256,
                   "evalSamples": 150, "profileMinibatches": 2, "seeds": [0]},
    }
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = value
    return {"apiVersion": GROUP_VERSION, "kind": "PowerAwareTrainingJob",
            "metadata": {"name": name}, "spec": body}


@pytest.fixture(scope="module")
def shared_ns(kube: KubeClient, request: pytest.FixtureRequest, checkpoint_root: Path,
              ) -> Iterator[str]:
    """One job namespace for a whole module, so its jobs share the namespace's cache
    ConfigMaps."""
    import uuid

    module = request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")
    with (temporary_namespace(kube, f"op-{module}-{uuid.uuid4().hex[:5]}") as name,
          job_namespace(kube, name, checkpoint_root)):
        yield name


def seed_efficiency(kube: KubeClient, namespace: str, spec: dict[str, Any],
                    samples_to_accuracy: tuple[float, ...] = (2048.0, 3072.0)) -> None:
    """A job's efficiency vector in the namespace's cache, so its estimate is a cache hit; a
    vector already there (another job's of the same key) is kept, as the cache keeps it."""
    parsed = PowerAwareTrainingJobSpec.model_validate(spec)
    key = efficiency_cache_key(parsed, mf.weights_identity(parsed))
    vector = EfficiencyVector.from_samples(
        model=parsed.model.architecture, dataset=parsed.dataset.name,
        target_accuracy=parsed.target_accuracy, batch_sizes=list(parsed.batch_sizes),
        samples_to_accuracy=list(samples_to_accuracy))
    try:
        kube.create(api_path("v1", "configmaps", namespace), {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": mf.efficiency_configmap_name(key),
                         "labels": {"edgetrain.io/cache": "efficiency",
                                    "edgetrain.io/cache-key": key}},
            "data": {"efficiency.json": vector.model_dump_json()}})
    except KubeApiError as exc:
        if exc.code != 409:
            raise


# The nodes whose chart agents `session_agents` runs (a label of the tests', so that a test's
# own nodes can join or stay out).
AGENTS_LABEL = {"edgetrain.io/test-agents": "on"}


@contextlib.contextmanager
def chart_agents(cluster: LocalCluster, kube: KubeClient, namespace: str,
                 selector: dict[str, str]) -> Iterator[dict[str, str]]:
    """The chart's node agents (agent only, as `helm install` puts them) on the nodes with the
    `selector` labels, Ready; node → its metrics URL, read from the pods the way Prometheus'
    pod discovery does. Their namespace is `<namespace>-node-agent`."""
    from edgetrain.cluster.controlplane import free_ports
    from tests.observability.test_chart import CHART, helm

    release, port = f"m{namespace[-6:]}", free_ports(1)[0]
    helm("install", release, str(CHART), "-n", namespace, "--wait", "--timeout", "170s",
         "--set", "operator.enabled=false", "--set", f"agent.metrics.port={port}",
         # The Orin Nano's full power modes (predicted profiling and its plans): the agent
         # mounts the CPU and EMC controls, which the node's runtime gives from its twin.
         "--set", "agent.boards.jetson-orin-nano.powerModes=true",
         "--set-json", "agent.nodeSelector=" + json.dumps(
             {"kubernetes.io/arch": None, **selector}),
         kubeconfig=cluster.kubeconfig)
    try:
        pods = kube.get(api_path("v1", "pods", f"{namespace}-node-agent"),
                        labelSelector=f"app.kubernetes.io/instance={release},"
                                      "app.kubernetes.io/component=node-agent")["items"]
        yield {p["spec"]["nodeName"]: f"http://{p['status']['podIP']}:"
               f"{p['metadata']['annotations']['prometheus.io/port']}/metrics" for p in pods}
    finally:
        helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "60s",
             kubeconfig=cluster.kubeconfig, check=False)
        kube.delete_ignore_missing(api_path("v1", "namespaces", name=f"{namespace}-node-agent"))


@pytest.fixture(scope="module")
def session_agents(cluster: LocalCluster, kube: KubeClient, trainer_images: RealCluster,
                   ) -> Iterator[dict[str, str]]:
    """The chart's node agents on the session's Jetsons for one module (the profile pods ask
    them for their clocks; training pods wait for their pins); node → metrics URL."""
    import uuid

    from tests.cluster.fixtures import NANO, ORIN

    for node in (NANO, ORIN):
        kube.patch(api_path("v1", "nodes", name=node), {"metadata": {"labels": AGENTS_LABEL}})
    with (temporary_namespace(kube, f"agents-{uuid.uuid4().hex[:5]}") as ns,
          chart_agents(cluster, kube, ns, AGENTS_LABEL) as urls):
        yield urls
