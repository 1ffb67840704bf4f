"""The images built as a user builds them (scripts/build-images.sh, as `make images-core` runs
it) and run under a container engine against the session's local control plane: one tag per
image lists linux/amd64 and linux/arm64; the node agent of each architecture (arm64 under QEMU
emulation) reads a device twin through a mount and serves /metrics; the operator, logged in with
a ServiceAccount token at the standard in-pod path, takes a PowerAwareTrainingJob out of
Pending; the arm64 trainer (the Debian base with PyPI's aarch64 CPU torch) measures a profile
point and trains a few steps on a twin through the worker wrapper the pods use. Each image
starts from the bytecode it holds: nothing is compiled when its command starts on a read-only
root.

The arm64 runs prove the entry points, the arm64 wheels and the wrapper on that architecture,
not CUDA on a Jetson. Where no engine or no arm64 emulation can be set up (not root, no apt),
the tests are skipped with that reason; with CI set they fail instead, because `make setup`
installs both there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from edgetrain.api.crd import PLURAL, VERSION
from edgetrain.cluster import KubeClient, LocalCluster, api_path
from edgetrain.cluster.controlplane import free_ports
from edgetrain.cluster.images import export_host_archive
from edgetrain.device.sim import DeviceTwin
from tests.helpers import FAST_PROFILE_ARGS, http_get
from tests.node_agent.helpers import wait_until
from tests.observability.test_chart import CHART, helm

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-images.sh"
REGISTRY = "localhost/edgetrain"
SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
RELEASE = "img"


ARCHES = ("amd64", "arm64")
BUILT = re.compile(r"^built (\S+) (\d+) (\d+) (\w+)$", re.M)
MANIFEST = re.compile(r"^manifest (\S+) (\S+)$", re.M)


@dataclass(frozen=True)
class Engine:
    """The engine the build script picked, and the environment it was run with."""

    name: str
    env: dict[str, str]
    images: dict[str, str]  # name -> the one tag (a manifest list of every architecture)
    per_arch: dict[tuple[str, str], str]  # (name, arch) -> that architecture's image

    def run(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.name, *args], capture_output=True, text=True,
                              env=self.env, timeout=timeout_s)


def _script(env: dict[str, str], *args: str, timeout_s: float
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=timeout_s)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI: `make setup` installs it)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def engine() -> Engine:
    """The operator and node-agent images, built (or brought up to date) by the user's script."""
    # PYTHON: the wheel cache is filled with this interpreter's pip (Debian's python3 has none).
    env = dict(os.environ, REGISTRY=REGISTRY, PYTHON=sys.executable,
               CONTAINERS_CONF=str(ROOT / "images" / "containers.conf"))
    found = _script(env, "--engine-only", timeout_s=600)
    if found.returncode != 0:
        _unavailable(f"no container engine: {found.stderr.strip()[-500:]}")
    name = re.findall(r"engine: (\S+)", found.stderr)[-1]
    emulation = _script(env, "--emulation-only", timeout_s=600)
    if emulation.returncode != 0:
        _unavailable(emulation.stderr.strip().splitlines()[-1])
    # A cold build (bases, wheels, layers; arm64 under emulation) takes minutes; a warm one
    # reuses every layer and only remakes the two manifest lists.
    built = _script(env, "operator", "node-agent", timeout_s=2400)
    assert built.returncode == 0, f"image build failed:\n{built.stderr[-6000:]}"
    images = {ref.split("/")[-1].split(":")[0]: ref for ref, _ in MANIFEST.findall(built.stdout)}
    assert set(images) == {"operator", "node-agent"}, built.stdout
    per_arch = {(ref.split("/")[-1].split(":")[0], arch): ref
                for ref, _, _, arch in BUILT.findall(built.stdout)}
    assert set(per_arch) == {(n, a) for n in images for a in ARCHES}, built.stdout
    return Engine(name, env, images, per_arch)


@pytest.fixture
def release(cluster: LocalCluster, kube: KubeClient, namespace: str) -> Iterator[str]:
    """The chart's CRD, ServiceAccounts and RBAC; no operator pod, no agent pod scheduled."""
    helm("install", RELEASE, str(CHART), "-n", namespace, "--wait", "--timeout", "120s",
         "--set", "operator.replicas=0",
         # The agent's ServiceAccount and RBAC are wanted; its DaemonSet must match no node.
         "--set-json", 'agent.nodeSelector={"edgetrain.io/images-test":"none"}',
         "--set", "checkNodeSelectors=false",  # on purpose: the chart would refuse it
         "--set", f"operator.settings.namespaces={{{namespace}}}",
         "--set", f"worker.namespaces={{{namespace}}}",
         kubeconfig=cluster.kubeconfig)
    try:
        yield namespace
    finally:
        helm("uninstall", RELEASE, "-n", namespace, "--wait", "--timeout", "60s",
             kubeconfig=cluster.kubeconfig, check=False)


def service_account_dir(cluster: LocalCluster, kube: KubeClient, namespace: str, sa: str,
                        folder: Path) -> Path:
    """What the kubelet mounts at the standard path: a bound token, the cluster CA, the
    namespace; readable by the operator image's non-root user."""
    req = kube.create(api_path("v1", "serviceaccounts", namespace, sa, "token"), {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600}})
    folder.mkdir(parents=True)
    (folder / "token").write_text(req["status"]["token"])
    (folder / "ca.crt").write_bytes(cluster.pki.ca_crt.read_bytes())
    (folder / "namespace").write_text(namespace)
    folder.chmod(0o755)
    for f in folder.iterdir():
        f.chmod(0o644)
    return folder


def api_env(cluster: LocalCluster) -> list[str]:
    return ["-e", "KUBERNETES_SERVICE_HOST=127.0.0.1",
            "-e", f"KUBERNETES_SERVICE_PORT={cluster.ports['apiserver']}"]


def threads_env() -> list[str]:
    """The suite's PyTorch thread count (OMP_NUM_THREADS, see the Makefile) into a container,
    as a virtual node passes it to its pods."""
    threads = os.environ.get("OMP_NUM_THREADS")
    return ["-e", f"OMP_NUM_THREADS={threads}"] if threads else []


@pytest.fixture
def containers(engine: Engine) -> Iterator[list[str]]:
    """Names of containers a test started; removed afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        engine.run("rm", "-f", "-t", "2", name)


def start(engine: Engine, containers: list[str], args: list[str]) -> str:
    name = f"edgetrain-test-{uuid.uuid4().hex[:8]}"
    containers.append(name)
    out = engine.run("run", "-d", "--name", name, "--network", "host", *args)
    assert out.returncode == 0, out.stderr
    return name


def logs(engine: Engine, name: str) -> str:
    out = engine.run("logs", name)
    return (out.stdout + out.stderr)[-4000:]


def metrics(port: int) -> str:
    try:
        r = http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    except httpx.HTTPError:
        return ""
    return r.text if r.status_code == 200 else ""


def test_one_tag_lists_amd64_and_arm64(engine: Engine) -> None:
    """What a registry serves under each tag: a manifest list whose entries are images of
    the architecture they claim, so a Jetson pulls arm64 and the GPU server amd64."""
    for name, ref in engine.images.items():
        out = engine.run("manifest", "inspect", ref)
        assert out.returncode == 0, out.stderr
        listed = {m["platform"]["architecture"]: m["digest"]
                  for m in json.loads(out.stdout)["manifests"]}
        assert set(listed) == set(ARCHES), (ref, out.stdout)
        for arch in ARCHES:
            image = engine.per_arch[(name, arch)]
            config = engine.run("image", "inspect", "--format",
                                "{{.Architecture}} {{.Os}} {{.Digest}}", image)
            assert config.stdout.split()[:2] == [arch, "linux"], (image, config.stdout)


def test_a_real_node_gets_the_image_of_its_platform_uncompressed(engine: Engine,
                                                                 tmp_path: Path) -> None:
    """What `cluster up` copies into the real node's containerd for a manifest list: the amd64
    member alone, as a docker archive of plain layers, named by one of that image's tags."""
    archive, name = export_host_archive(engine.images["operator"], tmp_path / "op.tar")
    amd64 = engine.per_arch[("operator", "amd64")]
    image_id = engine.run("image", "inspect", "--format", "{{.Id}}", amd64).stdout.strip()
    tags = json.loads(engine.run("image", "inspect", "--format", "{{json .RepoTags}}",
                                 amd64).stdout)
    with tarfile.open(archive) as tar:
        member = tar.extractfile("manifest.json")
        assert member is not None
        (manifest,) = json.load(member)
        for layer in manifest["Layers"]:
            data = tar.extractfile(layer)
            assert data is not None and data.read(2) != b"\x1f\x8b", layer  # not gzipped
    assert manifest["Config"] == f"{image_id}.json" and manifest["RepoTags"] == [name]
    assert name in tags


def test_a_build_from_the_inputs_of_the_last_keeps_the_image(engine: Engine) -> None:
    """Built again from the same inputs, each image and its list are kept (podman 4 takes
    seconds per image to find every layer in its cache); an image whose tag was moved since
    is built again, from the layer cache, to what it was."""
    ref = engine.per_arch[("operator", "amd64")]

    def image_id(image: str) -> str:
        return engine.run("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()

    built_id = image_id(ref)
    again = _script(engine.env, "operator", timeout_s=600)
    assert again.returncode == 0, again.stderr[-3000:]
    for arch in ARCHES:
        assert f"{engine.per_arch[('operator', arch)]} is up to date" in again.stderr, again.stderr
    assert f"{engine.name} build" not in again.stderr, again.stderr
    assert MANIFEST.search(again.stdout) and len(BUILT.findall(again.stdout)) == len(ARCHES)
    moved = engine.run("tag", engine.per_arch[("node-agent", "amd64")], ref)
    assert moved.returncode == 0 and image_id(ref) != built_id, moved.stderr
    rebuilt = _script(engine.env, "operator", timeout_s=600)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert f"build {ref} (linux/amd64)" in rebuilt.stderr, rebuilt.stderr
    assert f"{engine.per_arch[('operator', 'arm64')]} is up to date" in rebuilt.stderr
    assert image_id(ref) == built_id


@pytest.mark.parametrize("arch", ARCHES)
def test_images_carry_no_torch(engine: Engine, arch: str) -> None:
    for image in engine.images.values():
        # The one tag, resolved for the architecture the way a node's runtime does.
        out = engine.run("run", "--rm", "--arch", arch, "--entrypoint", "python3", image, "-c",
                         "import importlib.util as u, platform; print(u.find_spec('torch'), "
                         "u.find_spec('matplotlib'), platform.machine())", timeout_s=300)
        assert out.returncode == 0, out.stderr
        machine = {"amd64": "x86_64", "arm64": "aarch64"}[arch]
        assert out.stdout.split() == ["None", "None", machine], (image, out.stdout)
    user = engine.run("image", "inspect", "--format", "{{.Config.User}}",
                      engine.per_arch[("operator", arch)])
    assert user.stdout.strip() == "65532:65532"


@pytest.mark.parametrize("arch", ARCHES)
def test_node_agent_container_reads_a_twin_and_serves_metrics(
        cluster: LocalCluster, kube: KubeClient, release: str, engine: Engine,
        containers: list[str], nano: DeviceTwin, tmp_path: Path, arch: str) -> None:
    """The agent of each architecture (arm64 under emulation, as on a Nano) on a Nano twin."""
    ns = release
    node = f"img-nano-{arch}-{uuid.uuid4().hex[:5]}"
    # A Node object without a kubelet: the agent only labels it and watches its pods.
    kube.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                  "metadata": {"name": node}})
    try:
        sa = service_account_dir(cluster, kube, f"{ns}-node-agent",
                                 f"{RELEASE}-edgetrain-node-agent",
                                 tmp_path / "sa")
        port = free_ports(1)[0]
        name = start(engine, containers, [
            "-v", f"{sa}:{SA_PATH}:ro", "-v", f"{nano.root}:/twin", *api_env(cluster),
            "--arch", arch, engine.images["node-agent"], "--node-name", node,
            "--sysfs-root", "/twin",
            "--metrics-address", "127.0.0.1", "--metrics-port", str(port),
            "--power-backend", "sysfs"])
        try:
            # Emulated Python starts several times slower than native.
            text = wait_until(lambda: "edgetrain_power_watts{" in metrics(port) and metrics(port),
                              180, "node-agent /metrics")
        except TimeoutError:
            raise AssertionError(logs(engine, name)) from None
        assert f'edgetrain_node_info{{device_model="jetson-nano",l4t="32.7.1",node="{node}"' \
            in text
        machine = engine.run("exec", name, "python3", "-c",
                             "import platform; print(platform.machine())", timeout_s=120)
        assert machine.stdout.strip() == {"amd64": "x86_64", "arm64": "aarch64"}[arch]
        # It labelled its Node with the token at the standard path (no kubeconfig given).
        labels = wait_until(
            lambda: kube.get(api_path("v1", "nodes", name=node))["metadata"].get("labels", {})
            .get("edgetrain.io/device-model"), 20, "node labelled by the agent")
        assert labels == "jetson-nano"
    finally:
        kube.delete_ignore_missing(api_path("v1", "nodes", name=node))


def test_operator_container_takes_a_job_out_of_pending(
        cluster: LocalCluster, kube: KubeClient, release: str, engine: Engine,
        containers: list[str], tmp_path: Path) -> None:
    ns = release
    sa = service_account_dir(cluster, kube, ns, f"{RELEASE}-edgetrain-operator", tmp_path / "sa")
    patj: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "patj-digits.yaml").read_text())
    job = patj["metadata"]["name"]
    path = api_path(f"edgetrain.io/{VERSION}", PLURAL, ns)
    kube.create(path, patj)
    name = start(engine, containers, [
        "-v", f"{sa}:{SA_PATH}:ro", *api_env(cluster),
        "-e", f"EDGETRAIN_OPERATOR_NAMESPACES={ns}",
        "--read-only", "--tmpfs", "/tmp",  # as the chart runs it (readOnlyRootFilesystem)
        engine.images["operator"]])
    try:
        status = kube.wait_for(
            f"{path}/{job}",
            lambda o: (o.get("status") or {}).get("phase") not in (None, "Pending"),
            timeout_s=90, interval_s=0.5, what="phase past Pending")["status"]
        jobs = wait_until(lambda: kube.get(
            api_path("batch/v1", "jobs", ns),
            labelSelector=f"edgetrain.io/phase=estimate,edgetrain.io/job={job}")["items"],
            30, "estimate Job")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\noperator log:\n{logs(engine, name)}") from None
    assert status["phase"] == "EstimatingEfficiency", status
    assert jobs[0]["metadata"]["ownerReferences"][0]["name"] == job
    running = engine.run("inspect", "--format", "{{.State.Running}}", name)
    assert running.stdout.strip() == "true", logs(engine, name)


# Run in an image: records every module Python compiles from source (none, when the image
# holds valid bytecode for it) while it imports what the image's command imports at its start.
BYTECODE_CHECK = """
import json, platform, sys
from importlib.machinery import SourceFileLoader
compiled = []
source_to_code = SourceFileLoader.source_to_code
def record(self, data, path, *, _optimize=-1):
    compiled.append(path)
    return source_to_code(self, data, path, _optimize=_optimize)
SourceFileLoader.source_to_code = record
import importlib
from edgetrain.cli import build_app
for arg in sys.argv[1:]:
    build_app(arg) if not arg.startswith("edgetrain.") else importlib.import_module(arg)
def flags(name):
    with open(sys.modules[name].__spec__.cached, "rb") as f:
        return int.from_bytes(f.read(8)[4:], "little")  # 1: unchecked hash, 0: timestamp
print(json.dumps({"compiled": compiled, "machine": platform.machine(),
                  "edgetrain": flags("edgetrain.cli"), "typer": flags("typer.main")}))
"""
UNCHECKED_HASH, TIMESTAMP = 1, 0


def start_imports(engine: Engine, image: str, arch: str, *imports: str) -> dict[str, Any]:
    """BYTECODE_CHECK in IMAGE with a read-only root, as the chart runs pods; bytecode writing
    left on, so that a missing .pyc would be compiled (and recorded) on every start."""
    out = engine.run("run", "--rm", "--read-only", "--arch", arch, "--entrypoint", "python3",
                     "-e", "PYTHONDONTWRITEBYTECODE=", image, "-c", BYTECODE_CHECK, *imports,
                     timeout_s=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["machine"] == {"amd64": "x86_64", "arm64": "aarch64"}[arch], result
    return result


@pytest.mark.parametrize("arch", ARCHES)
def test_torch_free_images_start_from_their_bytecode(engine: Engine, arch: str) -> None:
    """Nothing compiles at a pod's start: the package and its dependencies carry bytecode
    checked by hash, not by file time (which a build or a registry may rewrite)."""
    for name, imports in (("operator", ("operator", "edgetrain.operator.handlers")),
                          ("node-agent", ("node-agent", "edgetrain.node_agent.agent"))):
        result = start_imports(engine, engine.images[name], arch, *imports)
        assert result["compiled"] == [], (name, result["compiled"][:20])
        assert (result["edgetrain"], result["typer"]) == (UNCHECKED_HASH, UNCHECKED_HASH), name


def test_arm64_trainer_starts_from_its_bytecode(engine: Engine, trainer_cpu: str) -> None:
    """The profile and train pods' wrapper and CLI (torch itself is imported by the workload;
    its bytecode is pip's, by file time, which the image keeps)."""
    result = start_imports(engine, trainer_cpu, "arm64", "worker", "profile",
                           "edgetrain.operator.worker", "numpy")
    assert result["compiled"] == [], result["compiled"][:20]
    assert (result["edgetrain"], result["typer"]) == (UNCHECKED_HASH, TIMESTAMP)


@pytest.fixture(scope="session")
def trainer_cpu(engine: Engine) -> str:
    """The arm64 trainer on the local Debian base with PyPI's aarch64 CPU torch."""
    built = _script(engine.env, "trainer-cpu", timeout_s=2400)
    assert built.returncode == 0, f"trainer-cpu build failed:\n{built.stderr[-6000:]}"
    ((ref, _, _, arch),) = BUILT.findall(built.stdout)
    assert arch == "arm64", built.stdout
    return ref


def test_arm64_trainer_profiles_and_trains_on_a_twin_through_the_worker(
        cluster: LocalCluster, kube: KubeClient, release: str, engine: Engine,
        trainer_cpu: str, containers: list[str], nano: DeviceTwin, tmp_path: Path) -> None:
    """`edgetrain worker -- edgetrain profile|train`, as the operator's Jetson pods run them,
    in the arm64 trainer under emulation: one profile point on a Nano twin published as a
    ConfigMap, then a few training steps with progress lines published while it trains.
    Emulated and on the CPU: this proves the entry points, the wheels and the wrapper on arm64,
    not CUDA on a Jetson (all device figures are the twin's, simulated)."""
    ns = release
    sa = service_account_dir(cluster, kube, ns, "edgetrain-worker", tmp_path / "sa")
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    data = Path(os.environ.get("EDGETRAIN_DATA_DIR", Path.home() / ".cache/edgetrain/data"))
    run_in = ["run", "--rm", "--network", "host", "-v", f"{sa}:{SA_PATH}:ro",
              "-v", f"{nano.root}:/twin", "-v", f"{out}:/out", "-v", f"{data}:/data:ro",
              "-e", "EDGETRAIN_DATA_DIR=/data", "-e", "EDGETRAIN_CACHE_DIR=/out/cache",
              "-e", f"POD_NAMESPACE={ns}", *api_env(cluster), *threads_env(), trainer_cpu]
    tag = uuid.uuid4().hex[:6]
    profile_cm, progress_cm = f"arm64-profile-{tag}", f"arm64-progress-{tag}"
    profiled = engine.run(
        *run_in, "worker", "--publish", profile_cm, "--file", "profile.csv=/out/p.csv",
        "--label", "edgetrain.io/test=arm64", "--",
        "edgetrain", "profile", "--model", "resnet8-w025", "--dataset", "digits",
        "--batch-sizes", "8", "--gpu-freqs", "921.6MHz", "--sysfs-root", "/twin",
        "-o", "/out/p.csv", "--json-progress", *FAST_PROFILE_ARGS, timeout_s=900)
    assert profiled.returncode == 0, profiled.stderr[-4000:]
    cm = kube.get(api_path("v1", "configmaps", ns, profile_cm))
    rows = cm["data"]["profile.csv"].strip().splitlines()
    assert rows[0].startswith("batch_size,gpu_freq_hz,time_per_sample_s,peak_power_w")
    assert len(rows) == 2 and rows[1].startswith("8,921600000,"), rows
    assert "(simulated)" in profiled.stderr
    # The operator makes the job's progress ConfigMap before its training pod; the worker
    # merge-patches it.
    kube.create(api_path("v1", "configmaps", ns), {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": progress_cm}, "data": {}})
    trained = engine.run(
        *run_in, "worker", "--progress", progress_cm, "--progress-interval", "0.2", "--",
        "edgetrain", "train", "--model", "resnet8-w025", "--dataset", "digits",
        "--batch-size", "16", "--target-accuracy", "0.99", "--sample-budget", "64",
        "--eval-interval", "32", "--eval-samples", "32", "--gpu-freq", "921.6MHz",
        "--sysfs-root", "/twin", "--checkpoint-dir", "/out/ck", "--json-progress",
        timeout_s=900)
    assert trained.returncode == 4, trained.stderr[-4000:]  # budget spent before 99 %
    result = json.loads(trained.stdout.strip().splitlines()[-1])
    assert result["samples"] == 64 and result["usage"]["simulated"], result
    progress = kube.get(api_path("v1", "configmaps", ns, progress_cm))["data"]
    assert json.loads(progress["result.json"])["samples"] == 64, progress
    assert (out / "ck").is_dir()
