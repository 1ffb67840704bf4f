"""docs/install.md's command blocks, run as written against a local cluster whose nodes start
bare (only the kubelet's hostname, os and arch labels; a twin's device tree on each Jetson): the
labels come from the chart's node agents and the images from the chart, as on a fresh K3s
fleet. The guide's `sh` blocks run on the machines themselves (K3s, the device plugin, image
builds): this test stands in for them with `edgetrain cluster up --bare`."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from edgetrain.api.keys import LABEL_EMULATED_ARCH
from edgetrain.cluster import KubeClient, api_path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "install.md"
FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>[\w-]*)\n(?P<body>.*?)^(?P=indent)```",
                   re.M | re.S)
JOBS = "edgetrain-jobs"


def blocks(lang: str) -> list[str]:
    """The guide's code blocks of one language, in order (list-indented ones dedented)."""
    return [textwrap.dedent(m["body"]) for m in FENCE.finditer(GUIDE.read_text())
            if m["lang"] == lang]


def test_every_fleet_only_block_says_where_it_runs() -> None:
    """`sh` blocks are not run here: each says where it runs; `bash` blocks hold no
    placeholder a reader would have to fill in (they run as written)."""
    fleet = blocks("sh")
    assert len(fleet) >= 4, fleet
    for body in fleet:
        first = body.splitlines()[0]
        assert first.startswith("# ") and re.search(
            r"\b(on the|on each|on a|needs the internet|with your)\b", first), body
    run = blocks("bash")
    assert run and all(not re.search(r"<[a-z][\w-]*>", b) for b in run), run
    assert {b for m in FENCE.finditer(GUIDE.read_text()) for b in [m["lang"]]} <= {
        "bash", "sh", ""}


# The guide's images come from the fleet's registry (`image.registry`), the estimator with
# CUDA and the trainer on JetPack. This fleet has no registry and no GPU: its nodes hold the
# CPU variants `cluster up` put there, and the chart is told so, as a user would be.
LOCAL_IMAGES = """images:
  estimator: {repository: estimator-cpu}
  trainer: {repository: trainer-cpu}
"""


def _shim(bin_dir: Path) -> dict[str, str]:
    """PATH with this checkout's `edgetrain` (a user's `pip install -e .`) before the
    virtualenv's kubectl and helm; `helm install|upgrade` get the local images' values."""
    bin_dir.mkdir(parents=True)
    venv_bin = Path(sys.executable).parent
    (bin_dir / "local-images.yaml").write_text(LOCAL_IMAGES)
    scripts = {
        "edgetrain": f'exec {sys.executable} -m edgetrain "$@"',
        "helm": f'case "$1" in install|upgrade) set -- "$@" -f {bin_dir}/local-images.yaml;;'
                f' esac\nexec {venv_bin}/helm "$@"',
    }
    for name, body in scripts.items():
        shim = bin_dir / name
        shim.write_text(f"#!/bin/sh\n{body}\n")
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {"PATH": f"{bin_dir}:{venv_bin}:{os.environ['PATH']}"}


def _run(script: str, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout_s)


def _ours(labels: dict[str, str]) -> dict[str, str]:
    """edgetrain's labels; not the emulated-arch label, which is the local fleet's QEMU, not
    the product's (a Jetson runs arm64 natively)."""
    return {k: v for k, v in labels.items()
            if k.startswith("edgetrain.io/") and k != LABEL_EMULATED_ARCH}


@pytest.mark.slow
def test_install_guide_runs_on_bare_nodes() -> None:
    """cluster up --bare (the fleet), then every bash block of the guide in order: the chart's
    agents label the Jetsons in one start each, `doctor` finds no problem, the job Succeeds with
    the estimator image on the amd64 server and the trainer image on a Jetson, and the
    uninstall leaves what the guide says and removes the rest."""
    tmp = Path(tempfile.mkdtemp(prefix="et-install-"))
    env = dict(os.environ, EDGETRAIN_CLUSTER_DIR=str(tmp / "cluster"),
               KUBECONFIG=str(tmp / "cluster" / "kubeconfig"), **_shim(tmp / "bin"))
    env.pop("EDGETRAIN_SYSFS_ROOT", None)
    # The fleet: K3s's part of the guide (its `sh` blocks). Namespaced real nodes only (the
    # README's test runs the server in the host's namespaces): the node agents and every job
    # pod run in their containers.
    up = _run("edgetrain cluster up --bare --no-real-server "
              "--jetson nano=2,orin=1 --server 1 --images operator,estimator-cpu",
              env, 900)
    assert up.returncode == 0, up.stdout + up.stderr
    outputs: list[str] = []
    try:
        with KubeClient.from_kubeconfig(Path(env["KUBECONFIG"])) as kube:
            nodes = kube.get(api_path("v1", "nodes"))["items"]
            assert len(nodes) == 4 and all(
                not _ours(n["metadata"].get("labels") or {}) for n in nodes), nodes
        for body in blocks("bash"):
            # "Set server: and path: to your export": this host's kernel has no NFS client, so
            # the export is the nodes' shared hostPath (the local example, same PV and claim).
            body = body.replace("examples/checkpoint-storage.yaml",
                                "examples/checkpoint-storage-local.yaml")
            out = _run(body, env, 1200)
            outputs.append(out.stdout)
            assert out.returncode == 0, (f"block:\n{body}\nstdout:\n{out.stdout}\nstderr:\n"
                                         f"{out.stderr}\n{_state(env)}")
            if body.startswith("helm install"):
                _every_jetson_labelled_in_one_start(env)
            if body.startswith("edgetrain doctor"):
                assert out.stdout.rstrip().endswith("no problems found"), out.stdout
                assert re.search(r"gpu-server-0\s+amd64\s+server\s+yes", out.stdout)
            if "custom-columns" in body:
                _each_phase_ran_its_image(env)
            if "patj/digits-5w" in body:
                assert re.search(r"digits-5w\s+Succeeded\s+\d+", out.stdout), out.stdout
        _uninstalled(env)
    finally:
        down = _run("edgetrain cluster down", env, 180)
    assert down.returncode == 0, down.stdout + down.stderr
    assert any("condition met" in o for o in outputs)
    shutil.rmtree(tmp, ignore_errors=True)


def _state(env: dict[str, str]) -> str:
    """What the cluster shows, for a failed block's message."""
    got = _run("kubectl get nodes --show-labels; kubectl get pods -A -o wide; kubectl get events"
               " -A --sort-by=.lastTimestamp | tail -30", env, 60)
    return got.stdout + got.stderr


def _every_jetson_labelled_in_one_start(env: dict[str, str]) -> None:
    """Each arm64 node is a Jetson with every label read from its twin, and neither the detect
    step nor the board's agent there started twice."""
    with KubeClient.from_kubeconfig(Path(env["KUBECONFIG"])) as kube:
        kube.wait_for(api_path("v1", "nodes"), lambda got: all(
            _ours(n["metadata"]["labels"]).get("edgetrain.io/node-kind") == "jetson"
            for n in got["items"] if n["metadata"]["labels"]["kubernetes.io/arch"] == "arm64"),
            timeout_s=300, what="every arm64 node labelled a Jetson")
        nodes = kube.get(api_path("v1", "nodes"))["items"]
        pods = kube.get(api_path("v1", "pods", "edgetrain-node-agent"))["items"]
    arm = [n for n in nodes if n["metadata"]["labels"]["kubernetes.io/arch"] == "arm64"]
    assert len(arm) == 3
    for node in arm:
        labels = _ours(node["metadata"]["labels"])
        assert set(labels) == {"edgetrain.io/node-kind", "edgetrain.io/device-model",
                               "edgetrain.io/l4t", "edgetrain.io/jetpack"}, labels
        assert node["metadata"]["annotations"]["edgetrain.io/gpu-frequencies-hz"]
    server = next(n for n in nodes if n["metadata"]["labels"]["kubernetes.io/arch"] == "amd64")
    assert not _ours(server["metadata"]["labels"])  # a server by its nvidia.com/gpu alone
    for pod in pods:
        statuses = pod["status"].get("initContainerStatuses", []) + pod["status"].get(
            "containerStatuses", [])
        assert statuses and all(s["restartCount"] == 0 for s in statuses), pod["metadata"]


def _each_phase_ran_its_image(env: dict[str, str]) -> None:
    """Estimation ran the estimator image on the amd64 server; training the trainer image on
    an arm64 Jetson."""
    with KubeClient.from_kubeconfig(Path(env["KUBECONFIG"])) as kube:
        pods = kube.get(api_path("v1", "pods", JOBS))["items"]
        arch = {n["metadata"]["name"]: n["metadata"]["labels"]["kubernetes.io/arch"]
                for n in kube.get(api_path("v1", "nodes"))["items"]}
    seen = set()
    for pod in pods:
        phase = pod["metadata"]["labels"].get("edgetrain.io/phase")
        image = pod["spec"]["containers"][0]["image"]
        node = pod["spec"]["nodeName"]
        if phase == "estimate":
            assert re.search(r"/estimator-cpu:", image) and arch[node] == "amd64", (image, node)
        elif phase in ("profile", "train"):
            assert re.search(r"/trainer-cpu:", image) and arch[node] == "arm64", (image, node)
        seen.add(phase)
    assert {"estimate", "train"} <= seen, seen


def _uninstalled(env: dict[str, str]) -> None:
    """After the guide's uninstall: no release, no CRD, no label of ours on any node; the
    checkpoint claim (yours) is still there."""
    with KubeClient.from_kubeconfig(Path(env["KUBECONFIG"])) as kube:
        crds = kube.get(api_path("apiextensions.k8s.io/v1", "customresourcedefinitions"))
        assert not [c for c in crds["items"] if c["metadata"]["name"].endswith(".edgetrain.io")]
        for node in kube.get(api_path("v1", "nodes"))["items"]:
            assert not _ours(node["metadata"]["labels"]), node["metadata"]
            assert not {k for k in node["metadata"].get("annotations") or {}
                        if k.startswith("edgetrain.io/") and k not in (
                            "edgetrain.io/simulated",)}
        # The chart's own namespace goes with it (gone, or still terminating).
        agents = kube.get_or_none(api_path("v1", "namespaces", name="edgetrain-node-agent"))
        assert agents is None or agents["metadata"].get("deletionTimestamp"), agents
        assert kube.get_or_none(api_path("v1", "persistentvolumeclaims", JOBS,
                                         "edgetrain-checkpoints")) is not None
