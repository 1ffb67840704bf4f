"""`edgetrain vnodes` against the session cluster, and `edgetrain cluster up/status/down`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgetrain.cluster import KubeClient, LocalCluster, api_path, binaries, container_log
from edgetrain.cluster.process import ManagedProcess, pid_alive
from edgetrain.kube import node_schedulable


def _edgetrain(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgetrain", *args], capture_output=True,
                          text=True, timeout=timeout_s, env={**os.environ, "COLUMNS": "200"})


def test_vnodes_command_attaches_nodes_to_an_existing_cluster(
    cluster: LocalCluster, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    proc = ManagedProcess(
        "vnodes-cli",
        [sys.executable, "-m", "edgetrain", "vnodes", "--kubeconfig", str(cluster.kubeconfig),
         "--jetson", "orin=1", "--prefix", "cli", "--work-dir", str(tmp_path / "w")],
        tmp_path / "vnodes.log",
    ).start()
    node = api_path("v1", "nodes", name="cli-jetson-orin-nano-0")
    try:
        proc.wait_ready(lambda: node_schedulable(kube.get(node)), 90, "registered and Ready")
        kube.create(api_path("v1", "pods", namespace), {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hello"},
            "spec": {"restartPolicy": "Never", "nodeName": "cli-jetson-orin-nano-0",
                     "containers": [{"name": "c", "image": "x",
                                     "command": ["sh", "-c", "echo $EDGETRAIN_NODE_NAME"]}]},
        })
        pod = kube.wait_for(api_path("v1", "pods", namespace, "hello"),
                            lambda p: p.get("status", {}).get("phase") == "Succeeded",
                            timeout_s=60, what="Succeeded")
        assert container_log(pod, "c").read_text().strip() == "cli-jetson-orin-nano-0"
    finally:
        proc.stop(grace_s=20)
    assert proc.returncode() == 0, proc.log_path.read_text()
    assert kube.get_or_none(node) is None  # deregistered on exit


@pytest.mark.slow
@pytest.mark.cluster
def test_cluster_up_status_down(tmp_path: Path) -> None:
    run_dir = tmp_path / "c"
    up = _edgetrain("cluster", "up", "--jetson-runtime", "virtual",
                    "--jetson", "nano=1", "--server", "0", "--idle", "3",
                    "--dir", str(run_dir))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        kubeconfig = run_dir / "kubeconfig"
        assert f"export KUBECONFIG={kubeconfig}" in up.stdout
        nodes = subprocess.run([str(binaries.kubectl()), "get", "nodes", "--no-headers"],
                               capture_output=True, text=True, check=True, timeout=60,
                               env={**os.environ, "KUBECONFIG": str(kubeconfig)}).stdout
        assert "vnode-jetson-nano-0" in nodes and " Ready " in nodes
        assert nodes.count("kwok-idle-") == 3
        status = _edgetrain("cluster", "status", "--dir", str(run_dir))
        assert status.returncode == 0 and "kube-apiserver" in status.stdout, status.stdout
        again = _edgetrain("cluster", "up", "--jetson-runtime", "virtual",
                           "--jetson", "nano=1", "--server", "0",
                           "--dir", str(run_dir))
        assert again.returncode == 0, again.stderr
    finally:
        cluster = LocalCluster.attach(run_dir)
        pids = [c.pid for c in cluster.components.values()] if cluster else []
        down = _edgetrain("cluster", "down", "--dir", str(run_dir))
    assert down.returncode == 0, down.stderr
    assert pids and not any(pid_alive(p) for p in pids)
    assert LocalCluster.attach(run_dir) is None
    assert "no cluster running" in _edgetrain("cluster", "down", "--dir", str(run_dir)).stdout
