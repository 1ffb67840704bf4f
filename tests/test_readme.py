"""The README's command blocks, run as written: a user's first steps are the tested path."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import edgetrain
from edgetrain.cli.cluster import real_node_unavailable
from edgetrain.cluster import KubeClient, api_path, binaries
from edgetrain.cluster.realnode import STATE_FILE, leftovers

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def block(section: str) -> str:
    """The first ```bash block under the heading `section`."""
    text = README.read_text()
    start = text.index(f"\n## {section}\n")
    m = re.compile(r"```bash\n(.*?)```", re.S).search(text, start)
    assert m is not None, f"no bash block under {section!r}"
    return m.group(1)


def run_block(script: str, tmp_path: Path, timeout_s: float,
              ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, EDGETRAIN_CLUSTER_DIR=str(tmp_path / "cluster"))
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout_s)


@pytest.mark.slow
def test_on_a_cluster_block_runs_as_written() -> None:
    """cluster up, helm install --wait, a job to Succeeded, kubectl logs, cluster down: the
    operator runs from its image on the real server node (a kubelet with containerd) where
    this host can run one, the node agents and the job's pods on virtual nodes; nothing of
    edgetrain runs outside the cluster but the control plane and the virtual nodes."""
    script = block("On a cluster")
    assert "helm install" in script and "kubectl logs" in script
    # The job runs in a namespace that enforces Pod Security `restricted`, and succeeds there.
    jobs = re.search(r"worker\.namespaces=\{([\w-]+)\}", script)
    assert jobs is not None, script
    assert (f"kubectl label namespace {jobs[1]} pod-security.kubernetes.io/enforce=restricted"
            in script) and f"kubectl apply -n {jobs[1]} " in script, script
    # The block's last command tears the cluster down: run it after looking inside.
    body, last = script.rstrip().rsplit("\n", 1)
    assert last.split("#")[0].strip() == "edgetrain cluster down", last
    # A short directory: the real node's unix sockets live under it (107-byte paths at most).
    tmp_path = Path(tempfile.mkdtemp(prefix="et-readme-"))
    run_dir = tmp_path / "cluster"
    reason = real_node_unavailable()
    try:
        out = run_block(body, tmp_path, timeout_s=900)
        assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr}"
        assert "condition met" in out.stdout
        assert re.search(r"digits-5w\s+Succeeded\s+\d+\s+\d+", out.stdout), out.stdout
        # kubectl logs reached the operator's pod on its node through the API server.
        assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (INFO|WARNING) ",
                         out.stdout, re.M), out.stdout
        if reason is None:
            _operator_runs_from_its_image_on_the_real_node(run_dir)
            state = json.loads((run_dir / STATE_FILE).read_text())
    finally:
        down = run_block(f"source .venv/bin/activate\n{last}\n", tmp_path, timeout_s=180)
    assert down.returncode == 0, down.stdout + down.stderr
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"no real node in CI: {reason}")
        pytest.skip(f"the block ran on virtual nodes only; real-node checks: {reason}")
    assert leftovers(run_dir, state) == []
    shutil.rmtree(tmp_path, ignore_errors=True)


def _operator_runs_from_its_image_on_the_real_node(run_dir: Path) -> None:
    """The operator pod: its image (imageID) on a containerd node, admitted under
    `restricted`, as UID 65532 with a read-only root (`kubectl exec` into it)."""
    with KubeClient.from_kubeconfig(run_dir / "kubeconfig") as kube:
        ns = kube.get(api_path("v1", "namespaces", name="edgetrain"))
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        pods = kube.get(api_path("v1", "pods", "edgetrain"),
                        labelSelector="app.kubernetes.io/component=operator")["items"]
        assert len(pods) == 1
        pod = pods[0]
        node = kube.get(api_path("v1", "nodes", name=pod["spec"]["nodeName"]))
    runtime = node["status"]["nodeInfo"]["containerRuntimeVersion"]
    assert runtime.startswith("containerd://"), runtime
    status = pod["status"]["containerStatuses"][0]
    assert status["image"].endswith("/operator:" + edgetrain.__version__), status
    assert status["imageID"].startswith("sha256:"), status  # an image containerd holds
    assert status["containerID"].startswith("containerd://"), status
    kubectl = [str(binaries.kubectl()), "--kubeconfig", str(run_dir / "kubeconfig"), "exec",
               "-n", "edgetrain", pod["metadata"]["name"], "--"]
    who = subprocess.run([*kubectl, "id", "-u"], capture_output=True, text=True, timeout=60)
    assert who.returncode == 0 and who.stdout.strip() == "65532", who
    root = subprocess.run([*kubectl, "sh", "-c", "touch /x"], capture_output=True, text=True,
                          timeout=60)
    assert root.returncode != 0 and "Read-only file system" in root.stderr, root


def test_plan_block_runs_on_files_that_exist(tmp_path: Path) -> None:
    script = block("`edgetrain plan`")
    for name in re.findall(r"examples/[\w.-]+", script):
        assert (ROOT / name).is_file(), f"README names {name}, which does not exist"
    out = run_block(script, tmp_path, timeout_s=120)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["within_limit"] and plan["power_w"] <= plan["power_limit_w"]
    assert {"B1", "B2"} <= set(plan["baselines"])
