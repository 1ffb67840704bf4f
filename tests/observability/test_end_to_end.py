"""One PowerAwareTrainingJob end to end with the chart's identities: the operator runs with its
ServiceAccount token (kubeconfig holding only that token), the node agent runs from the chart's
DaemonSet with its own token, and the agent pins the training pod's planned frequency."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgetrain.cluster import KubeClient, LocalCluster, VNodeAgent, api_path
from edgetrain.cluster.controlplane import free_ports
from edgetrain.device import GpuDevfreq
from tests.node_agent.helpers import events, sample_value, wait_until
from tests.observability.test_chart import CHART, NODE, helm

pytestmark = [pytest.mark.slow]


def token_kubeconfig(cluster: LocalCluster, kube: KubeClient, ns: str, sa: str,
                     path: Path) -> Path:
    """A kubeconfig whose only credential is a bound token of `sa` (TokenRequest API)."""
    token = kube.create(api_path("v1", "serviceaccounts", ns, sa, "token"), {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600}})["status"]["token"]
    doc = yaml.safe_load(cluster.kubeconfig.read_text())
    doc["users"] = [{"name": sa, "user": {"token": token}}]
    doc["contexts"][0]["context"]["user"] = sa
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def test_one_job_with_operator_and_agent_service_accounts(
        cluster: LocalCluster, kube: KubeClient, vnodes: VNodeAgent, namespace: str,
        tmp_path: Path) -> None:
    from tests.operator.conftest import job_manifest, patj_path

    port = free_ports(1)[0]
    helm("install", "e2e", str(CHART), "-n", namespace, "--wait", "--timeout", "120s",
         "--set", f"agent.metrics.port={port}", "--set-json", "agent.guard.windowSeconds=2",
         "--set-json", f'agent.nodeSelector={{"kubernetes.io/hostname":"{NODE}"}}',
         "--set", "operator.replicas=0", kubeconfig=cluster.kubeconfig)
    nano = next(n for n in vnodes.nodes if n.name == NODE)
    dev = GpuDevfreq.discover(nano.host_root)
    before = dev.current_range()
    kc = token_kubeconfig(cluster, kube, namespace, "e2e-edgetrain-operator",
                          tmp_path / "operator.kubeconfig")
    log = tmp_path / "operator.log"
    env = {**os.environ, "KUBECONFIG": str(kc),
           "EDGETRAIN_OPERATOR_NAMESPACES": namespace,
           "EDGETRAIN_OPERATOR_POLL_INTERVAL_S": "1",
           "EDGETRAIN_OPERATOR_RETRY_BACKOFF_S": "1",
           "EDGETRAIN_OPERATOR_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
           "EDGETRAIN_OPERATOR_PROFILE_MIN_WINDOW_S": "0.3",
           "EDGETRAIN_OPERATOR_PROGRESS_INTERVAL_S": "0.5"}
    with log.open("wb") as out:
        op = subprocess.Popen([sys.executable, "-m", "edgetrain", "operator"], stdout=out,
                              stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_until(lambda: op.poll() is not None
                   or "Initial authentication has finished" in log.read_text(), 60,
                   "operator logged in")
        assert op.poll() is None, log.read_text()[-3000:]
        kube.create(patj_path(namespace), job_manifest("e2e"))
        try:
            obj = kube.wait_for(patj_path(namespace, "e2e"),
                                lambda o: o.get("status", {}).get("phase") in
                                ("Succeeded", "Failed"), timeout_s=420, interval_s=1.0,
                                what="job done")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{log.read_text()[-4000:]}") from None
        status: dict[str, Any] = obj["status"]
        assert status["phase"] == "Succeeded", (status, log.read_text()[-3000:])
        freq = int(status["selection"]["gpuFrequencyHz"])
        pinned = [e for e in events(kube, namespace, "GpuFrequencyPinned")
                  if e["source"]["component"] == "edgetrain-node-agent"]
        assert pinned, "the chart's agent never pinned the training pod"
        assert f"{freq / 1e6:g} MHz" in pinned[0]["message"]
        pod = kube.get(api_path("v1", "pods", namespace, pinned[0]["involvedObject"]["name"]))
        assert pod["metadata"]["annotations"]["edgetrain.io/gpu-frequency-hz"] == str(freq)
        text = wait_until(lambda: (t := _metrics(port)) and t, 10, "metrics")
        energy = sample_value(text, "edgetrain_pod_energy_joules_total",
                              pod=pod["metadata"]["name"])
        assert energy is not None and energy > 0
        wait_until(lambda: dev.current_range() == before, 30, "range restored after the job")
        forbidden = [line for line in log.read_text().splitlines() if "403" in line
                     or "Forbidden" in line]
        assert not forbidden, forbidden[:5]
        sel = status["selection"]
        print(f"\njob e2e: b={sel['batchSize']} at {freq / 1e6:g} MHz on {sel['node']}, "
              f"planned {sel['powerWatts']} W; agent pinned it; board energy while pinned "
              f"{energy:.1f} J (simulated)")
    finally:
        if op.poll() is None:
            op.send_signal(signal.SIGTERM)
            try:
                op.wait(timeout=20)
            except subprocess.TimeoutExpired:
                op.kill()
        helm("uninstall", "e2e", "-n", namespace, "--wait", "--timeout", "60s",
             kubeconfig=cluster.kubeconfig, check=False)
        time.sleep(0.5)


def _metrics(port: int) -> str:
    import httpx

    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return ""
