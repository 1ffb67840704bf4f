"""The images built as a user builds them (scripts/build-images.sh, as `make images-core` runs
it) and run under a container engine against the session's local control plane: the node agent
reads a device twin through a mount and serves /metrics; the operator, logged in with a
ServiceAccount token at the standard in-pod path, takes a PowerAwareTrainingJob out of Pending.

Where no engine can be installed (not root, no apt) the tests are skipped with that reason;
with CI set they fail instead, because `make setup` installs the engine there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
from edgetrain.device.sim import DeviceTwin
from tests.node_agent.helpers import wait_until
from tests.observability.test_chart import CHART, helm

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-images.sh"
REGISTRY = "localhost/edgetrain"
SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
RELEASE = "img"


@dataclass(frozen=True)
class Engine:
    """The engine the build script picked, and the environment it was run with."""

    name: str
    env: dict[str, str]
    images: dict[str, str]

    def run(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.name, *args], capture_output=True, text=True,
                              env=self.env, timeout=timeout_s)


def _script(env: dict[str, str], *args: str, timeout_s: float
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=timeout_s)


@pytest.fixture(scope="session")
def engine() -> Engine:
    """The operator and node-agent images, built (or brought up to date) by the user's script."""
    # PYTHON: the wheel cache is filled with this interpreter's pip (Debian's python3 has none).
    env = dict(os.environ, REGISTRY=REGISTRY, PYTHON=sys.executable,
               CONTAINERS_CONF=str(ROOT / "images" / "containers.conf"))
    found = _script(env, "--engine-only", timeout_s=600)
    if found.returncode != 0:
        reason = f"no container engine: {found.stderr.strip()[-500:]}"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI: `make setup` installs one)")
        pytest.skip(reason)
    name = re.findall(r"engine: (\S+)", found.stderr)[-1]
    # A cold build (base, wheels, layers) takes minutes; a warm one reuses every layer.
    built = _script(env, "operator", "node-agent", timeout_s=1500)
    assert built.returncode == 0, f"image build failed:\n{built.stderr[-6000:]}"
    images = {m[0].split("/")[-1].split(":")[0]: m[0]
              for m in re.findall(r"^built (\S+) (\d+) (\d+)$", built.stdout, re.M)}
    assert set(images) == {"operator", "node-agent"}, built.stdout
    return Engine(name, env, images)


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
        r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    except httpx.HTTPError:
        return ""
    return r.text if r.status_code == 200 else ""


def test_images_carry_no_torch(engine: Engine) -> None:
    for image in engine.images.values():
        out = engine.run("run", "--rm", "--entrypoint", "python3", image, "-c",
                         "import importlib.util as u; print(u.find_spec('torch'), "
                         "u.find_spec('matplotlib'))")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["None", "None"], (image, out.stdout)
    user = engine.run("image", "inspect", "--format", "{{.Config.User}}",
                      engine.images["operator"])
    assert user.stdout.strip() == "65532:65532"


def test_node_agent_container_reads_a_twin_and_serves_metrics(
        cluster: LocalCluster, kube: KubeClient, release: str, engine: Engine,
        containers: list[str], nano: DeviceTwin, tmp_path: Path) -> None:
    ns = release
    node = f"img-nano-{uuid.uuid4().hex[:5]}"
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
            engine.images["node-agent"], "--node-name", node, "--sysfs-root", "/twin",
            "--metrics-address", "127.0.0.1", "--metrics-port", str(port),
            "--power-backend", "sysfs"])
        try:
            text = wait_until(lambda: "edgetrain_power_watts{" in metrics(port) and metrics(port),
                              60, "node-agent /metrics")
        except TimeoutError:
            raise AssertionError(logs(engine, name)) from None
        assert f'edgetrain_node_info{{device_model="jetson-nano",l4t="32.7.1",node="{node}"' \
            in text
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
