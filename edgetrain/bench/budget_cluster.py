"""`edgetrain bench budget --cluster`: a site budget on a live local cluster set up the
README's way (its own block's commands: namespaces, checkpoint storage, `helm install`), with
the operator in its container on the real server node where the host has one, three twin Nanos
under one PowerBudget and their node agents, and jobs arriving in staggered rounds
(`budget_live.run_rounds`). Every device figure is simulated.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from edgetrain.api.budget import BUDGET_API_VERSION, BUDGET_KIND, BUDGET_PLURAL
from edgetrain.api.keys import LABEL_DEVICE_MODEL, NODE_AGENT_POD_SELECTOR
from edgetrain.bench.budget_live import (
    AgentPower,
    AuthorisedWatch,
    LiveBudgetResult,
    patj_manifest,
    run_rounds,
    summarise,
)
from edgetrain.kube import KubeClient, api_path

SITE_LABEL = "edgetrain.io/site"
SITE = "bench"
NANO_IDLE_W = 1.17  # the twin Nano's idle board draw (its board facts)
# The bench's jobs train briefly: the README's example job with a smaller sample budget.
JOB_BUDGET = {"estimateSamples": 3072, "trainSamples": 4096, "evalIntervalSamples": 512,
              "evalSamples": 200, "profileMinibatches": 2}


class BenchSetupError(RuntimeError):
    """The cluster could not be set up the README's way (what failed, and its output)."""


def repo_root() -> Path:
    """The checkout the bench runs from: it needs the chart, the README and the examples."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "charts" / "edgetrain").is_dir() or not (root / "README.md").is_file():
        raise BenchSetupError(f"no edgetrain checkout at {root}: `bench budget --cluster` runs"
                              " the README's chart install, from a clone of the repository")
    return root


def readme_install(root: Path) -> tuple[str, str]:
    """From the README's "On a cluster" block: the lines that set the shell up (source,
    export) and those from the first namespace to the end of `helm install`."""
    text = (root / "README.md").read_text()
    start = text.index("\n## On a cluster\n")
    match = re.compile(r"```bash\n(.*?)```", re.S).search(text, start)
    if match is None:
        raise BenchSetupError("README.md has no bash block under 'On a cluster'")
    lines = match.group(1).splitlines()
    env = [ln for ln in lines if ln.startswith(("source ", "export KUBECONFIG="))]
    first = next(i for i, ln in enumerate(lines) if ln.startswith("kubectl create namespace"))
    helm = next(i for i, ln in enumerate(lines) if ln.startswith("helm install"))
    end = helm
    while lines[end].rstrip().endswith("\\"):
        end += 1
    return "\n".join(env), "\n".join(lines[first:end + 1])


def _sh(script: str, root: Path, env: dict[str, str], timeout_s: float) -> str:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise BenchSetupError(f"{script.splitlines()[0]} … failed ({done.returncode}):\n"
                              f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.stdout


@contextlib.contextmanager
def readme_cluster(progress: Callable[[str], None]) -> Iterator[tuple[KubeClient, Path]]:
    """`edgetrain cluster up` with three Nanos and two servers, then the README's install;
    `cluster down` on the way out, whatever happened."""
    root = repo_root()
    run_dir = Path(tempfile.mkdtemp(prefix="et-bb-"))  # short: unix sockets live under it
    env = dict(os.environ, EDGETRAIN_CLUSTER_DIR=str(run_dir / "cluster"))
    edgetrain = [sys.executable, "-m", "edgetrain"]
    try:
        progress("cluster up: 3 Nanos, 2 servers (the first real where the host can)")
        _sh(" ".join([*edgetrain, "cluster", "up", "--jetson", "nano=3", "--server", "2"]),
            root, env, 900)
        kubeconfig = run_dir / "cluster" / "kubeconfig"
        env["KUBECONFIG"] = str(kubeconfig)
        shell_env, install = readme_install(root)
        progress("the README's namespaces, checkpoint storage and helm install")
        _sh(f"{shell_env}\n{install}", root, env, 900)
        yield KubeClient.from_kubeconfig(kubeconfig), run_dir
    finally:
        subprocess.run([*edgetrain, "cluster", "down"], cwd=root, env=env,
                       capture_output=True, timeout=300, check=False)


def _agent_urls(kube: KubeClient, nodes: list[str], timeout_s: float = 300) -> dict[str, str]:
    """Each Nano's node agent's /metrics, from its running pod (as Prometheus finds it)."""
    deadline = time.monotonic() + timeout_s
    urls: dict[str, str] = {}
    while time.monotonic() < deadline:
        pods = kube.get(api_path("v1", "pods"), labelSelector=NODE_AGENT_POD_SELECTOR)["items"]
        urls = {p["spec"]["nodeName"]: f"http://{p['status']['podIP']}:"
                f"{p['metadata']['annotations']['prometheus.io/port']}/metrics"
                for p in pods if p["spec"].get("nodeName") in nodes
                and (p.get("status") or {}).get("phase") == "Running"
                and (p.get("status") or {}).get("podIP")}
        if set(urls) == set(nodes):
            return urls
        time.sleep(1.0)
    raise BenchSetupError(f"node agents not running on {sorted(set(nodes) - set(urls))}")


def bench_budget_cluster(rounds: int, cap_w: float, *, hog_every: int = 2, seed: int = 0,
                         progress: Callable[[str], None] = lambda _m: None) -> LiveBudgetResult:
    """The staggered rounds on a README-installed cluster (see the module docstring)."""
    root = repo_root()
    template: dict[str, Any] = yaml.safe_load((root / "examples" / "patj-digits.yaml")
                                              .read_text())
    template["spec"]["budget"] = {**template["spec"].get("budget", {}), **JOB_BUDGET}
    with readme_cluster(progress) as (kube, _run_dir):
        nodes = sorted(n["metadata"]["name"] for n in kube.get(
            api_path("v1", "nodes"), labelSelector=f"{LABEL_DEVICE_MODEL}=jetson-nano")["items"])
        for node in nodes:
            kube.patch(api_path("v1", "nodes", name=node),
                       {"metadata": {"labels": {SITE_LABEL: SITE}}})
        kube.create(api_path(BUDGET_API_VERSION, BUDGET_PLURAL), {
            "apiVersion": BUDGET_API_VERSION, "kind": BUDGET_KIND, "metadata": {"name": SITE},
            "spec": {"nodeSelector": {"matchLabels": {SITE_LABEL: SITE}}, "capWatts": cap_w}})
        urls = _agent_urls(kube, nodes)
        namespace = _jobs_namespace(root)
        with AuthorisedWatch(kube, {n: NANO_IDLE_W for n in nodes}) as watch, \
                AgentPower(urls) as power:
            clocks, seconds, hogs, failures = run_rounds(
                kube, namespace, lambda name: patj_manifest(template, name, {SITE_LABEL: SITE}),
                rounds, 3, watch, cap_w, hog_every=hog_every, seed=seed, progress=progress)
        return summarise(clocks, seconds, hogs, failures, watch, power, cap_w, rounds)


def _jobs_namespace(root: Path) -> str:
    """The jobs' namespace the README's install enables (`worker.namespaces={…}`)."""
    _env, install = readme_install(root)
    match = re.search(r"worker\.namespaces=\{([\w-]+)\}", install)
    if match is None:
        raise BenchSetupError("the README's helm install names no worker namespace")
    return match.group(1)
