"""One PowerAwareTrainingJob through the chart as users install it: the operator runs in-cluster
(the chart's Deployment, its own ServiceAccount token), the node agent from the chart's
DaemonSet pins the training pod's planned frequency, and a real Prometheus that discovers the
agent's pod through the API server scrapes it as its node and shows the job's training progress
on the dashboard's progress panels.

Debian's Prometheus is built without `kubernetes_sd_configs`, so discovery is done here the way
it would do it, from the same pod fields and annotations (`prometheus.io/scrape|port`, podIP,
nodeName), into a `file_sd_configs` file."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgetrain.cluster import KubeClient, LocalCluster, api_path
from edgetrain.cluster.controlplane import free_ports
from edgetrain.device import GpuDevfreq
from tests.cluster.fixtures import ESTIMATES_LABEL, ESTIMATOR, JETSON_ARCH, TRAINER
from tests.cluster.realnodes import RealCluster
from tests.helpers import http_get, pod_log
from tests.node_agent.helpers import events, wait_until
from tests.observability.test_chart import (
    CHART,
    CHART_CHECKPOINTS,
    NODE,
    chart_nodes,
    helm,
    restricted_release,
)
from tests.observability.test_prometheus import dashboard_queries, expand, run_prometheus

pytestmark = [pytest.mark.slow]
PROGRESS_PANELS = ("Training progress (samples)", "Validation accuracy")


def diagnose(kube: KubeClient, ns: str) -> str:
    """Pods, their states and log tails: what a user would look at with kubectl."""
    out = []
    for pod in kube.get(api_path("v1", "pods", ns))["items"]:
        meta, st = pod["metadata"], pod.get("status", {})
        out.append(f"pod {meta['name']} on {pod['spec'].get('nodeName')}: {st.get('phase')} "
                   f"{json.dumps(st.get('containerStatuses', []))[:600]}")
        with contextlib.suppress(Exception):
            for c in pod["spec"]["containers"]:
                out.append(pod_log(kube, pod, c["name"])[-1500:])
    return "\n".join(out)


def discover(kube: KubeClient, namespace: str) -> list[dict[str, Any]]:
    """file_sd target groups for the pods that ask to be scraped (kubernetes_sd's pod role)."""
    groups = []
    for pod in kube.get(api_path("v1", "pods", namespace))["items"]:
        notes = pod["metadata"].get("annotations") or {}
        ip = pod.get("status", {}).get("podIP")
        if notes.get("prometheus.io/scrape") == "true" and ip:
            groups.append({"targets": [f"{ip}:{notes['prometheus.io/port']}"],
                           "labels": {"kubernetes_node": pod["spec"]["nodeName"],
                                      "kubernetes_pod": pod["metadata"]["name"]}})
    return groups


def start_prometheus(kube: KubeClient, namespace: str, tmp: Path,
                     ) -> tuple[subprocess.Popen[bytes], str]:
    """Prometheus scraping the pods discovered in `namespace`."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: run `make prometheus` (Debian package)")
    groups = discover(kube, namespace)
    assert groups, "no pod asks to be scraped"
    (tmp / "targets.json").write_text(json.dumps(groups))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                   "scrape_timeout": "900ms"},
        "scrape_configs": [{
            "job_name": "edgetrain-node-agent",
            "file_sd_configs": [{"files": [str(tmp / "targets.json")]}],
        }],
    }
    return run_prometheus(binary, config, tmp)


@pytest.fixture
def release(cluster: LocalCluster, kube: KubeClient, trainer_images: RealCluster,
            estimator_image: RealCluster, namespace: str, checkpoint_root: Path,
            ) -> Iterator[dict[str, Any]]:
    # The operator under `restricted`, jobs beside it with their checkpoint claim.
    placed = chart_nodes(trainer_images)
    with restricted_release(kube, namespace, checkpoint_root) as jobs:
        yield from _installed(cluster, kube, namespace, jobs, placed)


def _installed(cluster: LocalCluster, kube: KubeClient, namespace: str, jobs: str,
               placed: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    port = free_ports(1)[0]
    helm("install", "e2e", str(CHART), "-n", namespace, "--wait", "--timeout", "180s", *placed,
         # The CPU images the nodes hold (nothing can be pulled here), the estimator on the
         # one server that holds it.
         "--set", f"images.estimator.repository={ESTIMATOR}",
         "--set-json", 'images.estimator.platforms=["linux/amd64"]',
         "--set", f"images.trainer.repository={TRAINER}",
         "--set-json", f'images.trainer.platforms=["linux/{JETSON_ARCH}"]',
         "--set-json", f"operator.settings.serverSelector={json.dumps(ESTIMATES_LABEL)}",
         "--set", f"agent.metrics.port={port}", "--set-json", "agent.guard.windowSeconds=2",
         "--set-json", f'agent.nodeSelector={{"kubernetes.io/hostname":"{NODE}"}}',
         "--set", f"operator.settings.namespaces={{{jobs}}}",
         "--set", f"worker.namespaces={{{jobs}}}",  # the chart's worker RBAC
         *CHART_CHECKPOINTS,
         "--set-json", "operator.settings.pollIntervalSeconds=1",
         "--set-json", "operator.settings.retryBackoffSeconds=1",
         "--set-json", "operator.settings.progressIntervalSeconds=0.5",
         # The suite's threads per PyTorch process in the workload pods (the Makefile's 1).
         "--set-json", "operator.settings.workerThreads="
         + os.environ.get("OMP_NUM_THREADS", "null"),
         "--set-json", 'operator.extraEnv=[{"name":"EDGETRAIN_OPERATOR_PROFILE_MIN_WINDOW_S",'
                       '"value":"0.3"},{"name":"EDGETRAIN_OPERATOR_PROFILE_STABILIZE_WINDOW_S",'
                       '"value":"0.3"}]',
         kubeconfig=cluster.kubeconfig)
    try:
        yield {"namespace": namespace, "port": port, "jobs": jobs,
               "agent_namespace": f"{namespace}-node-agent"}
    finally:
        helm("uninstall", "e2e", "-n", namespace, "--wait", "--timeout", "60s",
             kubeconfig=cluster.kubeconfig, check=False)


def test_one_job_in_cluster_with_dashboards(
        cluster: LocalCluster, kube: KubeClient, trainer_images: RealCluster,
        release: dict[str, Any], tmp_path: Path) -> None:
    from tests.operator.conftest import job_manifest, patj_path

    ns = release["jobs"]
    (op_pod,) = kube.get(api_path("v1", "pods", release["namespace"]),
                         labelSelector="app.kubernetes.io/component=operator")["items"]
    assert op_pod["spec"]["serviceAccountName"] == "e2e-edgetrain-operator"
    dev = GpuDevfreq.discover(trainer_images.node(NODE).dir / "twin")
    before = dev.current_range()
    prom, url = start_prometheus(kube, release["agent_namespace"], tmp_path)
    try:
        started_s = time.time()
        # job_manifest's small budget: its pods share the host's two cores with the fleet.
        kube.create(patj_path(ns), job_manifest("e2e"))
        try:
            obj = kube.wait_for(patj_path(ns, "e2e"),
                                lambda o: o.get("status", {}).get("phase") in
                                ("Succeeded", "Failed"), timeout_s=480, interval_s=1.0,
                                what="job done")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{diagnose(kube, ns)}\n"
                                 f"{diagnose(kube, release['agent_namespace'])}") from None
        status: dict[str, Any] = obj["status"]
        assert status["phase"] == "Succeeded", status
        # The chart's agent pinned the planned frequency, and restored the range after.
        freq = int(status["selection"]["gpuFrequencyHz"])
        pinned = [e for e in events(kube, ns, "GpuFrequencyPinned")
                  if e["source"]["component"] == "edgetrain-node-agent"]
        # (The profile pod's clocks may be pinned too: tests/test_readme.py checks those.)
        trained = [e for e in pinned if "-train-" in e["involvedObject"]["name"]]
        assert trained and f"{freq / 1e6:g} MHz" in trained[0]["message"], pinned
        wait_until(lambda: dev.current_range() == before, 30, "range restored after the job")
        # Prometheus found the agent through the API server, at its pod's address.
        targets = http_get(f"{url}/api/v1/targets").json()["data"]["activeTargets"]
        (agent,) = kube.get(api_path("v1", "pods", release["agent_namespace"]),
                            labelSelector="app.kubernetes.io/component=node-agent")["items"]
        assert [(t["labels"]["instance"], t["labels"]["kubernetes_node"]) for t in targets] \
            == [(f"{agent['status']['podIP']}:{release['port']}", NODE)]
        # The progress panels showed this job while it trained.
        job = "e2e"  # training_job: the PowerAwareTrainingJob (label edgetrain.io/job)
        for _dash, title, expr in dashboard_queries():
            if title not in PROGRESS_PANELS:
                continue
            resp = http_get(f"{url}/api/v1/query_range", params={
                "query": expand(expr), "start": started_s, "end": time.time(), "step": "1s"},
                timeout=10).json()
            series = {r["metric"].get("training_job"): [float(v) for _, v in r["values"]]
                      for r in resp["data"]["result"]}
            assert job in series, (title, series)
            assert max(series[job]) > 0, (title, series[job])
        samples = max(float(v) for r in http_get(f"{url}/api/v1/query_range", params={
            "query": "max(edgetrain_training_samples)", "start": started_s,
            "end": time.time(), "step": "1s"}).json()["data"]["result"] for _, v in r["values"])
        assert 0 < samples <= status["training"]["samples"]
        print(f"\njob e2e in-cluster: b={status['selection']['batchSize']} at "
              f"{freq / 1e6:g} MHz; progress seen by Prometheus up to {samples:.0f} of "
              f"{status['training']['samples']} samples (simulated device)")
    finally:
        prom.kill()
        prom.wait(timeout=10)
