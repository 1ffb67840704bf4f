"""Real server nodes and the shared checkpoint directory of `cluster up --jetson-runtime real`:
gpu-server-0 in the host's namespaces and gpu-server-1 namespaced, both amd64 kubelets with
containerd advertising simulated `nvidia.com/gpu` that the scheduler counts; two arm64 Nanos
whose pods share the checkpoint claim of examples/checkpoint-storage-local.yaml under
`restricted`; `cluster down` leaves nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgetrain.api.keys import GPU_RESOURCE, LABEL_EMULATED_ARCH
from edgetrain.api.pod_security import DEFAULT_CHECKPOINT_DIR
from edgetrain.cluster import KubeClient, api_path, binaries
from edgetrain.cluster.gpus import advertised_gpus
from edgetrain.cluster.images import PAUSE_IMAGE, podman_ref
from edgetrain.cluster.jetsons import STATE_FILE, jetson_leftovers
from edgetrain.cluster.realnode import STATE_FILE as REAL_STATE
from edgetrain.cluster.realnode import leftovers
from edgetrain.kube import Obj
from tests.cluster.test_jetson_real import _heartbeat, _unavailable

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
AGENT_IMAGE = "ghcr.io/edgetrain/node-agent:0.1.0"
NS = "edgetrain-jobs"  # the namespace examples/checkpoint-storage-local.yaml binds its claim in
RESTRICTED = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
              "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                      "capabilities": {"drop": ["ALL"]}}


def _edgetrain(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgetrain", *args], capture_output=True,
                          text=True, timeout=timeout_s, env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Two real arm64 Nanos (node-agent image only) and two real servers (no images)."""
    reason = _unavailable()
    if reason is None and podman_ref("node-agent", "0.1.0") is None:
        reason = "no node-agent image in podman (`make images-core`)"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"no real nodes in CI: {reason}")
        pytest.skip(f"this host cannot run real nodes: {reason}")
    run_dir = tmp_path_factory.mktemp("servers") / "c"
    started = time.monotonic()
    up = _edgetrain("cluster", "up", "--jetson", "nano=2", "--server", "2",
                    "--jetson-runtime", "real", "--images", "", "--jetson-images",
                    "node-agent", "--dir", str(run_dir))
    states: list[tuple[str, dict[str, object]]] = []
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        print(f"cluster up: {time.monotonic() - started:.1f} s\n{up.stdout}")
        states = [(f, json.loads((run_dir / f).read_text())) for f in (STATE_FILE, REAL_STATE)
                  if (run_dir / f).exists()]
        yield run_dir
    finally:
        down = _edgetrain("cluster", "down", "--dir", str(run_dir))
        assert down.returncode == 0, down.stdout + down.stderr
        for f, state in states:
            found = (jetson_leftovers(run_dir, state) if f == STATE_FILE
                     else leftovers(run_dir, state))
            assert found == [], f


@pytest.fixture(scope="module")
def kube(cluster: Path) -> Iterator[KubeClient]:
    with KubeClient.from_kubeconfig(cluster / "kubeconfig") as client:
        yield client


def test_servers_are_amd64_kubelets_advertising_simulated_gpus(
        cluster: Path, kube: KubeClient) -> None:
    """Both servers: containerd kubelets, labelled servers (not virtual, not emulated), with
    nvidia.com/gpu allocatable through the kubelet's later status updates."""
    state = json.loads((cluster / STATE_FILE).read_text())
    assert "gpu-server-1" in state["nodes"] and "gpu-server-0" not in state["nodes"]
    assert (cluster / REAL_STATE).exists()  # gpu-server-0: the host's namespaces
    for name in ("gpu-server-0", "gpu-server-1"):
        node = kube.get(api_path("v1", "nodes", name=name))
        beat = _heartbeat(node)
        node = kube.wait_for(api_path("v1", "nodes", name=name),
                             lambda n, beat=beat: _heartbeat(n) > beat, timeout_s=60,
                             what="a later status update")
        labels = node["metadata"]["labels"]
        assert labels["edgetrain.io/node-kind"] == "server", labels
        assert "edgetrain.io/virtual" not in labels and LABEL_EMULATED_ARCH not in labels
        assert labels["kubernetes.io/arch"] == "amd64"
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
        assert advertised_gpus(node) == 8, node["status"]["allocatable"]
        assert node["status"]["capacity"][GPU_RESOURCE] == "8"
    status = _edgetrain("cluster", "status", "--dir", str(cluster))
    assert status.returncode == 0, status.stderr
    print(status.stdout)
    rows = [line for line in status.stdout.splitlines()
            if re.search(r"gpu-server-\d\s+\S\s+server\s", line)]
    assert len(rows) == 2 and all("containerd://2." in r and "amd64" in r for r in rows), \
        status.stdout


def _pod(name: str, spec: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                     "securityContext": RESTRICTED, **spec}}


def _finished(kube: KubeClient, name: str, timeout_s: float = 180) -> tuple[Obj, str]:
    done = kube.wait_for(api_path("v1", "pods", NS, name),
                         lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"),
                         timeout_s=timeout_s, what="finished")
    return done, kube.get_text(api_path("v1", "pods", NS, name, "log"))


def _restricted_namespace(kube: KubeClient) -> None:
    if kube.get_or_none(api_path("v1", "namespaces", name=NS)) is None:
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": NS, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    kube.wait_for(api_path("v1", "serviceaccounts", NS, "default"), lambda _s: True,
                  timeout_s=30, what="default ServiceAccount")


def test_gpu_requests_schedule_on_the_servers_by_count(cluster: Path, kube: KubeClient) -> None:
    """Two pods of 8 GPUs take both servers; a third waits: the scheduler counts them."""
    _restricted_namespace(kube)
    for i in range(3):
        kube.create(api_path("v1", "pods", NS), _pod(f"gpus-{i}", {
            "containers": [{"name": "c", "image": PAUSE_IMAGE, "imagePullPolicy": "Never",
                            "resources": {"limits": {GPU_RESOURCE: "8"}},
                            "securityContext": CONTAINER_SECURITY}]}))

    def placed(pods: Obj) -> bool:
        mine = [p for p in pods["items"] if p["metadata"]["name"].startswith("gpus-")]
        running = [p for p in mine if p.get("status", {}).get("phase") == "Running"]
        waiting = [p for p in mine if any(c.get("reason") == "Unschedulable" for c in
                                          p.get("status", {}).get("conditions", []))]
        return len(running) == 2 and len(waiting) == 1
    pods = kube.wait_for(api_path("v1", "pods", NS), placed, timeout_s=120,
                         what="two pods running, one unschedulable")
    nodes = sorted(p["spec"].get("nodeName", "") for p in pods["items"]
                   if p["metadata"]["name"].startswith("gpus-"))
    assert nodes == ["", "gpu-server-0", "gpu-server-1"], nodes
    for i in range(3):
        kube.delete(api_path("v1", "pods", NS, f"gpus-{i}"))


def test_a_checkpoint_written_on_one_nano_is_read_on_the_other(
        cluster: Path, kube: KubeClient) -> None:
    """The local claim (a hostPath PV of the directory every node shares): a restricted arm64
    pod on jetson-nano-0 writes, one on jetson-nano-1 reads; the file is the host's, the
    worker UID's."""
    _restricted_namespace(kube)
    applied = subprocess.run(
        [str(binaries.kubectl()), "--kubeconfig",
         str(cluster / "kubeconfig"), "apply", "-f",
         str(ROOT / "examples" / "checkpoint-storage-local.yaml")],
        capture_output=True, text=True, timeout=60)
    assert applied.returncode == 0, applied.stderr
    marker = f"written-{time.time_ns()}"
    volume = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "edgetrain-checkpoints"}}]
    for name, node, script in (
            ("writer", "jetson-nano-0",
             f"import os, platform; open('/ckpt/{marker}.pt', 'w').write(platform.machine());"
             f" print(os.getuid())"),
            ("reader", "jetson-nano-1", f"print(open('/ckpt/{marker}.pt').read())")):
        kube.create(api_path("v1", "pods", NS), _pod(name, {
            "nodeName": node, "volumes": volume,
            "containers": [{"name": "c", "image": AGENT_IMAGE, "imagePullPolicy": "Never",
                            "command": ["python", "-c", script],
                            "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
                            "securityContext": CONTAINER_SECURITY}]}))
        done, log = _finished(kube, name)
        assert done["status"]["phase"] == "Succeeded", (done["status"], log)
        assert log.strip() == ("65532" if name == "writer" else "aarch64"), log
    host = Path(DEFAULT_CHECKPOINT_DIR) / f"{marker}.pt"
    assert host.read_text() == "aarch64" and host.stat().st_uid == 65532
    host.unlink()
