"""`edgetrain cluster up/status/down` with a real Nano (arm64 under QEMU, no image: nothing runs
on it here) and kwok idle nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgetrain.cluster import LocalCluster, binaries
from edgetrain.cluster.jetsons import STATE_FILE, jetson_leftovers
from edgetrain.cluster.process import pid_alive
from tests.cluster.realnodes import skip_or_fail_without_kubelets


def _edgetrain(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgetrain", *args], capture_output=True,
                          text=True, timeout=timeout_s, env={**os.environ, "COLUMNS": "200"})


@pytest.mark.slow
@pytest.mark.cluster
def test_cluster_up_status_down(tmp_path: Path) -> None:
    skip_or_fail_without_kubelets()
    run_dir = tmp_path / "c"
    up = _edgetrain("cluster", "up", "--jetson", "nano=1", "--server", "0", "--idle", "3",
                    "--jetson-images", "", "--dir", str(run_dir))
    state = json.loads((run_dir / STATE_FILE).read_text()) if (run_dir / STATE_FILE).exists() \
        else {}
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        kubeconfig = run_dir / "kubeconfig"
        assert f"export KUBECONFIG={kubeconfig}" in up.stdout
        nodes = subprocess.run([str(binaries.kubectl()), "get", "nodes", "--no-headers"],
                               capture_output=True, text=True, check=True, timeout=60,
                               env={**os.environ, "KUBECONFIG": str(kubeconfig)}).stdout
        assert "jetson-nano-0" in nodes and " Ready " in nodes
        assert nodes.count("kwok-idle-") == 3
        status = _edgetrain("cluster", "status", "--dir", str(run_dir))
        assert status.returncode == 0 and "kube-apiserver" in status.stdout, status.stdout
        assert "containerd://" in status.stdout, status.stdout  # each node's runtime
        again = _edgetrain("cluster", "up", "--jetson", "nano=1", "--server", "0",
                           "--jetson-images", "", "--dir", str(run_dir))
        assert again.returncode == 0, again.stderr
    finally:
        cluster = LocalCluster.attach(run_dir)
        pids = [c.pid for c in cluster.components.values()] if cluster else []
        down = _edgetrain("cluster", "down", "--dir", str(run_dir))
    assert down.returncode == 0, down.stderr
    assert pids and not any(pid_alive(p) for p in pids)
    assert LocalCluster.attach(run_dir) is None
    assert state and jetson_leftovers(run_dir, state) == []
    assert "no cluster running" in _edgetrain("cluster", "down", "--dir", str(run_dir)).stdout
