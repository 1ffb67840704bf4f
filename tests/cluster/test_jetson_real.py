"""A real arm64 Jetson node (`cluster up --jetson-runtime real`): a kubelet with containerd in
namespaces of its own, over a device twin grafted at the Nano's sysfs paths, running arm64
images under QEMU. The chart's node agent (its arm64 image) pins a pod's clock on the twin
through the real runtime; a `restricted` arm64 pod reads the twin; `cluster down` leaves no
process, mount, namespace, interface, cgroup or file behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgetrain.api.keys import ANNOTATION_GPU_FREQUENCY_HZ, LABEL_EMULATED_ARCH
from edgetrain.cluster import KubeClient, api_path
from edgetrain.cluster.hostnet import cannot_run_kubelet
from edgetrain.cluster.jetsons import STATE_FILE, jetson_leftovers
from edgetrain.cluster.realnode import missing_binaries
from edgetrain.kube import Obj
from tests.helpers import project_image_up_to_date, skip_here_fail_in_ci
from tests.observability.test_chart import CHART, helm

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
NODE = "jetson-nano-0"
NANO_DEVFREQ = "sys/devices/gpu.0/devfreq/57000000.gpu"
AGENT_IMAGE = "ghcr.io/edgetrain/node-agent:0.1.0"


def _edgetrain(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgetrain", *args], capture_output=True,
                          text=True, timeout=timeout_s, env={**os.environ, "COLUMNS": "200"})


def _unavailable() -> str | None:
    reason = cannot_run_kubelet()
    if reason is None and missing_binaries():
        reason = f"{', '.join(missing_binaries())} not built (`make cluster-bins`)"
    qemu = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")
    if reason is None and not (qemu.exists() and qemu.read_text().startswith("enabled")):
        reason = "no arm64 emulation (`make container-engine` registers qemu-aarch64)"
    return reason


@pytest.fixture(scope="module")
def jetson(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, object]]]:
    """`cluster up` with one real arm64 Nano and no server; (run dir, its jetsons.json)."""
    reason = _unavailable()
    skip_here_fail_in_ci(reason, "no real Jetson node in CI",
                         "this host cannot run a real Jetson node")
    project_image_up_to_date("node-agent")
    run_dir = tmp_path_factory.mktemp("jetson") / "c"
    started = time.monotonic()
    up = _edgetrain("cluster", "up", "--jetson", "nano=1", "--server", "0",
                    "--jetson-runtime", "real", "--jetson-images", "node-agent",
                    "--dir", str(run_dir))
    state: dict[str, object] = {}
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        # The start costs docs/cluster.md cites (shown with `pytest -rP`).
        print(f"cluster up: {time.monotonic() - started:.1f} s\n{up.stdout}")
        state = json.loads((run_dir / STATE_FILE).read_text())
        yield run_dir, state
    finally:
        started = time.monotonic()
        down = _edgetrain("cluster", "down", "--dir", str(run_dir))
        assert down.returncode == 0, down.stdout + down.stderr
        print(f"cluster down: {time.monotonic() - started:.1f} s\n{down.stdout}")
        if state:
            assert jetson_leftovers(run_dir, state) == []


@pytest.fixture(scope="module")
def kube(jetson: tuple[Path, dict[str, object]]) -> Iterator[KubeClient]:
    with KubeClient.from_kubeconfig(jetson[0] / "kubeconfig") as client:
        yield client


def _twin(run_dir: Path) -> Path:
    return run_dir / "nodes" / NODE / "twin"


def test_node_is_an_arm64_kubelet_in_namespaces_of_its_own(
        jetson: tuple[Path, dict[str, object]], kube: KubeClient) -> None:
    run_dir, state = jetson
    node = kube.get(api_path("v1", "nodes", name=NODE))
    info = node["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://2."), info
    labels = node["metadata"]["labels"]
    assert labels["edgetrain.io/node-kind"] == "jetson" and "edgetrain.io/virtual" not in labels
    # The label holds through the kubelet's status updates (every 10 s), which reset it.
    beat = _heartbeat(node)
    kube.wait_for(api_path("v1", "nodes", name=NODE), lambda n: _heartbeat(n) > beat,
                  timeout_s=60, what="a later status update")
    node = kube.get(api_path("v1", "nodes", name=NODE))
    assert node["metadata"]["labels"]["kubernetes.io/arch"] == "arm64"
    assert node["metadata"]["labels"][LABEL_EMULATED_ARCH] == "arm64"
    assert node["status"]["nodeInfo"]["architecture"] == "arm64"
    # Its own namespaces and cgroup root: nothing of it in the host's mount table or paths.
    rec = state["nodes"][NODE]  # type: ignore[index]
    assert rec["mnt_ns"] != os.readlink("/proc/self/ns/mnt")
    assert str(run_dir) not in Path("/proc/self/mountinfo").read_text()
    # The kubelet's hard-coded /var/lib/kubelet is the node's own directory.
    assert (run_dir / "nodes" / NODE / "kubelet" / "device-plugins" / "kubelet.sock").exists()
    status = _edgetrain("cluster", "status", "--dir", str(run_dir))
    assert status.returncode == 0, status.stderr
    print(status.stdout)  # RSS per component (docs/cluster.md)
    row = next((line for line in status.stdout.splitlines() if f" {NODE} " in line),
               status.stdout)
    assert "containerd://2." in row and "arm64 (QEMU)" in row, row


def _heartbeat(node: dict[str, object]) -> str:
    conds = node.get("status", {}).get("conditions", [])  # type: ignore[attr-defined]
    return str(next(c["lastHeartbeatTime"] for c in conds if c["type"] == "Ready"))


def test_chart_agent_pins_a_pods_clock_on_the_twin(
        jetson: tuple[Path, dict[str, object]], kube: KubeClient) -> None:
    """The chart's node agent, its arm64 image under QEMU, hostPath /sys read-only with the
    Nano's devfreq directory read-write: it pins an annotated pod's frequency on the twin."""
    run_dir, _ = jetson
    kubeconfig = run_dir / "kubeconfig"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": "edgetrain"}})
    helm("install", "edgetrain", str(CHART), "-n", "edgetrain", "--wait", "--timeout", "300s",
         "--set", "operator.enabled=false", "--set", "networkPolicy.enabled=false",
         kubeconfig=kubeconfig)
    # helm's --wait lets a DaemonSet of one pod be one unavailable (maxUnavailable 1). The
    # namespace holds two: the detect step (every arm64 node) and the Nano's agent.
    def of(ps: Obj, component: str) -> list[Obj]:
        return [p for p in ps["items"]
                if p["metadata"]["labels"].get("app.kubernetes.io/component") == component]

    def all_ready(ps: Obj) -> bool:
        pods = [*of(ps, "node-agent"), *of(ps, "node-detect")]
        return len(pods) == 2 and all(any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in p.get("status", {}).get("conditions", [])) for p in pods)
    ready = kube.wait_for(api_path("v1", "pods", "edgetrain-node-agent"), all_ready,
                          timeout_s=300, what="the node agent and the detect step Ready")
    agents, detect = of(ready, "node-agent"), of(ready, "node-detect")
    assert [p["spec"]["nodeName"] for p in agents] == [NODE]
    assert [p["spec"]["nodeName"] for p in detect] == [NODE]
    # The detect step's init container read the twin's devicetree through the hostPath of
    # /sys/firmware, its arm64 image under QEMU; its log is the real kubelet's.
    log = kube.get_text(api_path("v1", "pods", "edgetrain-node-agent",
                                 str(detect[0]["metadata"]["name"]), "log") + "?container=detect")
    assert "jetson-nano" in log, log
    image_id = agents[0]["status"]["containerStatuses"][0]["imageID"]
    freq_hz = 460_800_000
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "pinned", "annotations": {ANNOTATION_GPU_FREQUENCY_HZ: str(freq_hz)}},
        "spec": {"nodeName": NODE, "containers": [{
            "name": "c", "image": AGENT_IMAGE, "imagePullPolicy": "Never",
            "command": ["sleep", "600"]}]}}
    kube.create(api_path("v1", "pods", "default"), pod)
    devfreq = _twin(run_dir) / NANO_DEVFREQ
    deadline = time.monotonic() + 120
    while (devfreq / "max_freq").read_text().strip() != str(freq_hz):
        assert time.monotonic() < deadline, (devfreq / "max_freq").read_text()
        time.sleep(0.5)
    assert (devfreq / "min_freq").read_text().strip() == str(freq_hz)
    assert image_id, agents[0]["status"]


def test_restricted_arm64_pod_reads_the_twin(
        jetson: tuple[Path, dict[str, object]], kube: KubeClient) -> None:
    """Under `restricted`, non-root: the container is aarch64 (QEMU), its /sys is the node's
    (the twin's Nano) and read-only, as on a Jetson."""
    ns = "jetson-restricted"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": ns, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    kube.wait_for(api_path("v1", "serviceaccounts", ns, "default"), lambda _s: True,
                  timeout_s=30, what="default ServiceAccount")
    # runc masks /sys/firmware (the devicetree) in every unprivileged container, as on a
    # Jetson: the GPU is found through its uevent, the board through the twin's marker.
    script = (
        "import platform, pathlib\n"
        "from edgetrain.device.devfreq import GpuDevfreq\n"
        "print('machine', platform.machine())\n"
        "print('board', pathlib.Path('/run/edgetrain-twin/board').read_text().strip())\n"
        "print('l4t', pathlib.Path('/etc/nv_tegra_release').read_text().split(',')[0])\n"
        "gpu = GpuDevfreq.discover('/')\n"
        "print('gpu', gpu.path, max(gpu.available_frequencies_hz()))\n"
        "print('devicetree', pathlib.Path('/sys/firmware/devicetree').exists())\n"
        "try:\n    (gpu.path / 'max_freq').write_text('76800000')\n"
        "except OSError as e:\n    print('write', e.errno)\n")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reader"}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": NODE, "kubernetes.io/arch": "arm64"},
        "restartPolicy": "Never", "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                            "supplementalGroups": [44],
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "image": AGENT_IMAGE, "imagePullPolicy": "Never",
                        "command": ["python", "-c", script],
                        "securityContext": {"allowPrivilegeEscalation": False,
                                            "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}}]}}
    kube.create(api_path("v1", "pods", ns), pod)
    done = kube.wait_for(api_path("v1", "pods", ns, "reader"),
                         lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"),
                         timeout_s=180, what="finished")
    log = kube.get_text(api_path("v1", "pods", ns, "reader", "log"))
    assert done["status"]["phase"] == "Succeeded", (done["status"], log)
    assert "machine aarch64" in log and "board jetson-nano" in log, log
    assert "l4t # R32 (release)" in log and "devicetree False" in log, log
    assert "gpu /sys/class/devfreq/57000000.gpu 921600000" in log, log
    assert "write 30" in log, log  # EROFS: a pod's /sys is read-only, group 44 or not
