"""A real server node in `edgetrain cluster up`: a kubelet with containerd and runc that runs
pods from locally imported images, next to a namespaced Jetson node; `cluster down` leaves
nothing behind. Only one kubelet runs in the host's namespaces (hard-coded host paths): one
cluster per module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgetrain.cli.cluster import REAL_SERVER_NAME, real_node_unavailable
from edgetrain.cluster import KubeClient, api_path, binaries
from edgetrain.cluster.images import CHART_REGISTRY, PAUSE_IMAGE, ImageExports
from edgetrain.cluster.realnode import STATE_FILE, leftovers
from edgetrain.kube import node_ready
from tests.helpers import project_image_up_to_date, skip_here_fail_in_ci

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
NANO_ARGS = ("--jetson", "nano=1", "--jetson-arch", "amd64", "--jetson-images", "")


def _edgetrain(*args: str, timeout_s: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgetrain", *args], capture_output=True,
                          text=True, timeout=timeout_s, env={**os.environ, "COLUMNS": "200"})


def require_real_node() -> None:
    """Skip, saying why, where this host cannot run a kubelet; in CI that is a failure."""
    skip_here_fail_in_ci(real_node_unavailable(), "no real node in CI",
                         "this host cannot run a kubelet")


@pytest.fixture(scope="module")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """`cluster up` with a namespaced Nano (native, no images: nothing runs on it here) and
    the server node in the host's namespaces; (run dir, up's stdout)."""
    require_real_node()
    run_dir = tmp_path_factory.mktemp("real") / "c"
    up = _edgetrain("cluster", "up", *NANO_ARGS, "--server", "1", "--images", "",
                    "--dir", str(run_dir))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield run_dir, up.stdout
    finally:
        _edgetrain("cluster", "down", "--dir", str(run_dir))


@pytest.fixture(scope="module")
def real_kube(real_cluster: tuple[Path, str]) -> Iterator[KubeClient]:
    with KubeClient.from_kubeconfig(real_cluster[0] / "kubeconfig") as client:
        yield client


def test_server_node_is_a_kubelet_with_containerd(real_cluster: tuple[Path, str],
                                                  real_kube: KubeClient) -> None:
    run_dir, up_out = real_cluster
    node = real_kube.get(api_path("v1", "nodes", name=REAL_SERVER_NAME))
    info = node["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://2."), info
    assert info["kubeletVersion"] == binaries.K8S_VERSION
    assert node_ready(node)
    address = next(a["address"] for a in node["status"]["addresses"]
                   if a["type"] == "InternalIP")
    # The node's address is on the interface `cluster up` made, never the host's own.
    assert address.startswith("198.18."), address
    assert "edgetrain.io/virtual" not in node["metadata"]["labels"]
    assert node["metadata"]["labels"]["edgetrain.io/node-kind"] == "server"
    state = json.loads((run_dir / STATE_FILE).read_text())
    assert Path(f"/sys/class/net/etnode{state['net']['slot']}").exists()
    status = _edgetrain("cluster", "status", "--dir", str(run_dir))
    assert status.returncode == 0, status.stderr
    rows = {line.split()[1]: line for line in status.stdout.splitlines()
            if line.startswith("│ ") and len(line.split()) > 2}
    assert "containerd://2." in rows[REAL_SERVER_NAME]
    assert "containerd://2." in rows["jetson-nano-0"]
    assert "kubelet" in status.stdout and "containerd" in status.stdout
    assert f"real node {REAL_SERVER_NAME} (containerd://" in up_out


def test_pod_runs_from_a_local_image_under_restricted(real_kube: KubeClient) -> None:
    """The locally built pause image, no registry: admitted under `restricted`, run by runc,
    its imageID the digest containerd holds; the pod reaches no registry and needs none."""
    ns = "real-restricted"
    real_kube.create("/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": ns, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    real_kube.wait_for(api_path("v1", "serviceaccounts", ns, "default"), lambda _s: True,
                       timeout_s=30, what="default ServiceAccount")
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": REAL_SERVER_NAME},
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "c", "image": PAUSE_IMAGE, "imagePullPolicy": "Never",
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }
    real_kube.create(api_path("v1", "pods", ns), pod)
    running = real_kube.wait_for(
        api_path("v1", "pods", ns, "p"),
        lambda p: p.get("status", {}).get("phase") in ("Running", "Failed", "Succeeded"),
        timeout_s=120, what="Running")
    assert running["status"]["phase"] == "Running", running["status"]
    c = running["status"]["containerStatuses"][0]
    assert c["containerID"].startswith("containerd://")
    assert c["imageID"].startswith("sha256:") or "@sha256:" in c["imageID"], c
    assert running["status"]["podIP"].startswith("198.18."), running["status"]
    # Not admitted: what `restricted` forbids.
    bad = json.loads(json.dumps(pod))
    bad["metadata"]["name"] = "root"
    bad["spec"]["securityContext"] = {}
    bad["spec"]["containers"][0]["securityContext"] = {}
    with pytest.raises(Exception, match="violates PodSecurity"):
        real_kube.create(api_path("v1", "pods", ns), bad)
    real_kube.delete_ignore_missing(api_path("v1", "namespaces", name=ns))


def test_an_image_for_one_node_is_streamed_one_for_several_exported_once(
        real_cluster: tuple[Path, str], real_kube: KubeClient, tmp_path: Path) -> None:
    """An image going to one node is piped from podman into containerd, no archive on disk
    (for the CPU estimator, a third copy of 5 GB); one going to several nodes is exported
    once. Either way the node runs a pod from it."""
    project_image_up_to_date("node-agent")
    run_dir, _ = real_cluster
    ctr = [str(binaries.bin_dir() / "ctr"), "--address", str(run_dir / "node" / "ctd" / "ctd.sock")]
    for shared, archived in ((frozenset(), False),
                             (frozenset({("node-agent", "linux/amd64")}), True)):
        exports = ImageExports(tmp_path / f"exports-{archived}", "0.1.0", shared)
        try:
            (got,) = exports.import_into(ctr, ["node-agent"], "linux/amd64")
            assert not got.missing, got
            assert exports.work_dir.exists() is archived
        finally:
            exports.clean()
        assert not exports.work_dir.exists()
    ns = "real-streamed"
    real_kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": ns}})
    real_kube.wait_for(api_path("v1", "serviceaccounts", ns, "default"), lambda _s: True,
                       timeout_s=30, what="default ServiceAccount")
    real_kube.create(api_path("v1", "pods", ns), {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": REAL_SERVER_NAME},
                 "restartPolicy": "Never", "automountServiceAccountToken": False,
                 "containers": [{"name": "c", "imagePullPolicy": "Never",
                                 "image": f"{CHART_REGISTRY}/node-agent:0.1.0",
                                 "command": ["python", "-c", "print('streamed')"]}]}})
    done = real_kube.wait_for(api_path("v1", "pods", ns, "p"),
                              lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"),
                              timeout_s=180, what="Succeeded or Failed")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert real_kube.get_text(api_path("v1", "pods", ns, "p", "log")).strip() == "streamed"
    real_kube.delete_ignore_missing(api_path("v1", "namespaces", name=ns))


def test_up_again_reuses_the_node_and_a_second_cluster_gets_a_namespaced_server(
        real_cluster: tuple[Path, str], tmp_path: Path) -> None:
    run_dir, _ = real_cluster
    before = json.loads((run_dir / STATE_FILE).read_text())["pids"]["kubelet"]["pid"]
    again = _edgetrain("cluster", "up", *NANO_ARGS, "--server", "1", "--images", "",
                       "--dir", str(run_dir))
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads((run_dir / STATE_FILE).read_text())["pids"]["kubelet"]["pid"] == before
    # One kubelet in the host's namespaces: a second cluster says why in one line and gets
    # its server in namespaces of its own.
    other = tmp_path / "o"
    second = _edgetrain("cluster", "up", "--jetson", "", "--server", "1", "--images", "",
                        "--dir", str(other))
    try:
        assert second.returncode == 0, second.stdout + second.stderr
        assert (f"{REAL_SERVER_NAME} namespaced: another cluster's real node runs on this "
                "host") in " ".join(second.stdout.split()), second.stdout
        assert not (other / STATE_FILE).exists()
        with KubeClient.from_kubeconfig(other / "kubeconfig") as kube:
            node = kube.get(api_path("v1", "nodes", name=REAL_SERVER_NAME))
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    finally:
        _edgetrain("cluster", "down", "--dir", str(other))


def test_down_leaves_no_process_mount_interface_or_file(
        real_cluster: tuple[Path, str]) -> None:
    run_dir, _ = real_cluster
    state = json.loads((run_dir / STATE_FILE).read_text())
    assert leftovers(run_dir, {**state, "dir": "/nonexistent"}) != []  # it is running now
    down = _edgetrain("cluster", "down", "--dir", str(run_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert leftovers(run_dir, state) == []
    assert not Path("/var/lib/kubelet/device-plugins/kubelet.sock").exists()
