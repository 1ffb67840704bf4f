"""The README's command blocks, run as written: a user's first steps are the tested path."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

import edgetrain
from edgetrain.api.keys import LABEL_PHASE
from edgetrain.cli.cluster import REAL_SERVER_NAME, real_node_unavailable
from edgetrain.cluster import KubeClient, api_path, binaries
from edgetrain.cluster.jetsons import STATE_FILE as JETSONS_STATE
from edgetrain.cluster.jetsons import jetson_leftovers
from edgetrain.cluster.nsnode import SOCKET as NS_SOCKET
from edgetrain.cluster.realnode import STATE_FILE, leftovers
from tests.helpers import skip_here_fail_in_ci

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
    """cluster up, helm install --wait, a job to Succeeded, kubectl logs, cluster down, on real
    kubelets only where this host can run them: the operator from its image on a server node,
    the estimate pods from the CPU estimator on the servers (amd64), the node agents and the
    profile and train pods from their arm64 images on the Nanos under QEMU; nothing of
    edgetrain runs outside the cluster but the control plane."""
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
    # The block pauses after its `kubectl apply` while the operator's container is SIGKILLed on
    # the real node (a fault the kubelet itself recovers: same pod, restartCount 1); the rest of
    # the block then runs in a new shell, with the block's own `source` and `export` lines.
    apply = next(line for line in body.splitlines()
                 if line.startswith(f"kubectl apply -n {jobs[1]} "))
    head, tail = body.split(apply + "\n", 1)
    env_lines = "\n".join(line for line in head.splitlines()
                           if line.startswith(("source ", "export KUBECONFIG=")))
    try:
        first = run_block(head + apply + "\n", tmp_path, timeout_s=600)
        assert first.returncode == 0, f"stdout:\n{first.stdout}\nstderr:\n{first.stderr}"
        killed = _kill_the_operator_mid_job(run_dir) if reason is None else None
        # The block's own wait, and two minutes for what follows it.
        wait_min = re.search(r"Succeeded --timeout=(\d+)m", tail)
        assert wait_min is not None, tail
        rest = run_block(env_lines + "\n" + tail, tmp_path, timeout_s=int(wait_min[1]) * 60 + 120)
        out = subprocess.CompletedProcess(rest.args, rest.returncode, first.stdout + rest.stdout,
                                          first.stderr + rest.stderr)
        assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr}"
        assert "condition met" in out.stdout
        assert re.search(r"digits-5w\s+Succeeded\s+\d+\s+\d+", out.stdout), out.stdout
        _trained_onto_the_claim(run_dir, jobs[1])
        if reason is None:
            _every_pod_on_a_real_kubelet(run_dir, jobs[1])
        # kubectl logs reached the operator's pod on its node through the API server.
        assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (INFO|WARNING) ",
                         out.stdout, re.M), out.stdout
        if reason is None:
            assert killed is not None
            _operator_runs_from_its_image_on_the_real_node(run_dir, restarted_from=killed)
            state = json.loads((run_dir / STATE_FILE).read_text())
            ns_state = json.loads((run_dir / JETSONS_STATE).read_text())
    finally:
        down = run_block(f"source .venv/bin/activate\n{last}\n", tmp_path, timeout_s=180)
    assert down.returncode == 0, down.stdout + down.stderr
    skip_here_fail_in_ci(reason, "no real node in CI",
                         "the block ran on virtual nodes only; real-node checks")
    assert leftovers(run_dir, state) == []
    assert jetson_leftovers(run_dir, ns_state) == []
    shutil.rmtree(tmp_path, ignore_errors=True)


def _trained_onto_the_claim(run_dir: Path, namespace: str) -> None:
    """The restricted train pod kept its checkpoints on the namespace's claim: the host
    directory of examples/checkpoint-storage-local.yaml (every node's, at the same path) holds
    them, written by the worker UID; the profile pod had its clocks set by the node agent."""
    with KubeClient.from_kubeconfig(run_dir / "kubeconfig") as kube:
        job = kube.get(api_path("edgetrain.io/v1alpha1", "powerawaretrainingjobs", namespace,
                                "digits-5w"))
        claim = kube.get(api_path("v1", "persistentvolumeclaims", namespace,
                                  "edgetrain-checkpoints"))
        pv = kube.get(api_path("v1", "persistentvolumes", name=claim["spec"]["volumeName"]))
    # The chart's checkpointDir, where the claim is mounted, and the export are one path here.
    ckpt = Path(job["status"]["training"]["checkpointDir"])
    export = Path(pv["spec"]["hostPath"]["path"])
    assert ckpt.is_relative_to(export), (ckpt, export)
    files = list(ckpt.glob("*.pt"))
    assert files and all(f.stat().st_uid == 65532 for f in files), (ckpt, files)
    # The restricted profile pod asked the node agent for each clock it measured.
    with KubeClient.from_kubeconfig(run_dir / "kubeconfig") as kube:
        pinned = [e for e in kube.get(api_path("v1", "events", namespace),
                                      fieldSelector="reason=GpuFrequencyPinned")["items"]
                  if "-profile-" in e["involvedObject"]["name"]]
    assert pinned and all(e["source"]["component"] == "edgetrain-node-agent" for e in pinned)


def _every_pod_on_a_real_kubelet(run_dir: Path, namespace: str) -> None:
    """The job's pods ran on containerd kubelets: estimation from the CPU estimator on amd64
    servers, profiling and training from the CPU trainer on arm64 (emulated) Jetsons."""
    with KubeClient.from_kubeconfig(run_dir / "kubeconfig") as kube:
        pods = kube.get(api_path("v1", "pods", namespace))["items"]
        nodes = {n["metadata"]["name"]: n for n in kube.get(api_path("v1", "nodes"))["items"]}
    roles: dict[str, set[tuple[str, str, str]]] = {}
    for pod in pods:
        role = pod["metadata"].get("labels", {}).get(LABEL_PHASE, "")
        node = nodes[pod["spec"]["nodeName"]]
        roles.setdefault(role, set()).add((
            pod["spec"]["containers"][0]["image"].rsplit("/", 1)[-1].split(":")[0],
            node["metadata"]["labels"]["kubernetes.io/arch"],
            node["status"]["nodeInfo"]["containerRuntimeVersion"].split(":")[0]))
    assert roles.get("estimate") == {("estimator-cpu", "amd64", "containerd")}, roles
    assert roles.get("train") == {("trainer-cpu", "arm64", "containerd")}, roles
    assert roles.get("profile", set()) <= {("trainer-cpu", "arm64", "containerd")}, roles


def _node_ctr(run_dir: Path, node: str) -> list[str]:
    """`ctr` against a node's containerd: the host's server node's socket, or a namespaced
    node's from inside its namespaces."""
    if node == REAL_SERVER_NAME and (run_dir / STATE_FILE).exists():
        return [str(binaries.bin_dir() / "ctr"), "--address",
                str(run_dir / "node" / "ctd" / "ctd.sock")]
    holder = json.loads((run_dir / JETSONS_STATE).read_text())["nodes"][node]["pids"]["ns"]
    return ["nsenter", f"--target={holder['pid']}", "--mount", "--net", "--",
            str(binaries.bin_dir() / "ctr"), "--address", NS_SOCKET]


def _operator_pod(kube: KubeClient) -> dict[str, Any]:
    pods = kube.get(api_path("v1", "pods", "edgetrain"),
                    labelSelector="app.kubernetes.io/component=operator")["items"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return dict(pods[0])


def _kill_the_operator_mid_job(run_dir: Path) -> tuple[str, str]:
    """SIGKILL the operator's container through containerd once the job has left Pending (any
    later phase will do); returns the pod's name and the killed container's ID."""
    with KubeClient.from_kubeconfig(run_dir / "kubeconfig") as kube:
        # In whichever namespace the block applied it.
        kube.wait_for(api_path("edgetrain.io/v1alpha1", "powerawaretrainingjobs"),
                      lambda jobs: any(
                          job["metadata"]["name"] == "digits-5w"
                          and job.get("status", {}).get("phase", "Pending") != "Pending"
                          for job in jobs["items"]),
                      timeout_s=300, what="digits-5w past Pending")
        pod = _operator_pod(kube)
        nodes = {n["metadata"]["name"]: (n["spec"].get("taints"), [
            (c["type"], c["status"]) for c in n["status"].get("conditions", [])])
            for n in kube.get(api_path("v1", "nodes"))["items"]}
    container_id = pod["status"]["containerStatuses"][0]["containerID"]
    # Where it landed instead, and what the nodes said: the affinity only prefers the real one.
    assert container_id.startswith("containerd://"), (container_id, pod["spec"]["nodeName"],
                                                      nodes)
    kill = subprocess.run([*_node_ctr(run_dir, pod["spec"]["nodeName"]), "-n",
                           "k8s.io", "task", "kill", "-s", "SIGKILL",
                           container_id.removeprefix("containerd://")],
                          capture_output=True, text=True, timeout=60)
    assert kill.returncode == 0, kill.stderr
    return pod["metadata"]["name"], container_id


def _operator_runs_from_its_image_on_the_real_node(run_dir: Path,
                                                   restarted_from: tuple[str, str]) -> None:
    """The operator pod: its image (imageID) on a containerd node, admitted under
    `restricted`, as UID 65532 with a read-only root (`kubectl exec` into it), restarted by
    the kubelet after its SIGKILL (the job it was running still Succeeded)."""
    with KubeClient.from_kubeconfig(run_dir / "kubeconfig") as kube:
        ns = kube.get(api_path("v1", "namespaces", name="edgetrain"))
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        pod = _operator_pod(kube)
        node = kube.get(api_path("v1", "nodes", name=pod["spec"]["nodeName"]))
    runtime = node["status"]["nodeInfo"]["containerRuntimeVersion"]
    assert runtime.startswith("containerd://"), runtime
    status = pod["status"]["containerStatuses"][0]
    name, killed_id = restarted_from
    assert pod["metadata"]["name"] == name, "the kubelet restarts the container, in its pod"
    assert status["restartCount"] >= 1 and status["containerID"] != killed_id, status
    assert status["lastState"]["terminated"]["exitCode"] == 137, status  # 128 + SIGKILL
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
