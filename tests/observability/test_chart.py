"""The Helm chart: lint, render, and a real `helm install` into the local API server where the
node agent runs on a virtual Jetson with its own ServiceAccount token (not as admin)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from edgetrain.cluster import (
    KubeClient,
    LocalCluster,
    VNodeAgent,
    api_path,
    binaries,
    container_log,
)
from edgetrain.cluster.controlplane import free_ports
from edgetrain.device import GpuDevfreq
from tests.node_agent.helpers import events, sleeper_pod, wait_until

CHART = Path(__file__).resolve().parents[2] / "charts" / "edgetrain"
KUBE_VERSION = binaries.K8S_VERSION.lstrip("v")
NODE = "vn-jetson-nano-0"


def helm(*args: str, kubeconfig: Path | None = None, check: bool = True,
         ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HELM_CACHE_HOME="/tmp/edgetrain-helm/cache",
               HELM_CONFIG_HOME="/tmp/edgetrain-helm/config",
               HELM_DATA_HOME="/tmp/edgetrain-helm/data")
    argv = [str(binaries.bin_dir() / "helm"), *args]
    if kubeconfig is not None:
        argv += ["--kubeconfig", str(kubeconfig)]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180)
    if check and out.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")
    return out


def render(*sets: str, api_versions: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    args = ["template", "t", str(CHART), "-n", "edgetrain", "--kube-version", KUBE_VERSION]
    for s in sets:
        args += ["--set", s]
    for a in api_versions:
        args += ["--api-versions", a]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


def test_helm_lint_is_clean() -> None:
    out = helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in out.stdout
    assert "[WARNING]" not in out.stdout and "[ERROR]" not in out.stdout, out.stdout


def test_render_defaults() -> None:
    docs = render()
    kinds = sorted(d["kind"] for d in docs)
    assert "ServiceMonitor" not in kinds  # its CRD is not installed
    assert kinds.count("DaemonSet") == 1 and kinds.count("Deployment") == 1
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["command"] == ["edgetrain", "node-agent"]
    assert c["securityContext"]["privileged"] is True
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
    assert {v["hostPath"]["path"] for v in pod["volumes"]} == {
        "/sys", "/var/lib/edgetrain", "/etc/nv_tegra_release"}
    assert "--metrics-address=$(POD_IP)" in c["args"]
    svc = next(d for d in docs if d["kind"] == "Service")
    assert svc["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    dep = next(d for d in docs if d["kind"] == "Deployment")
    assert dep["spec"]["template"]["spec"]["containers"][0]["command"] == ["edgetrain",
                                                                          "operator"]
    cms = [d for d in docs if d["kind"] == "ConfigMap"]
    assert len(cms) == 2
    for cm in cms:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        (body,) = cm["data"].values()
        assert json.loads(body)["panels"]
    # The agent's RBAC is least privilege: pods read, its Node patched, Events created.
    agent_role = next(d for d in docs if d["kind"] == "ClusterRole"
                      and d["metadata"]["name"].endswith("-node-agent"))
    verbs = {(r["resources"][0], v) for r in agent_role["rules"] for v in r["verbs"]}
    assert verbs == {("pods", "get"), ("pods", "list"), ("pods", "watch"), ("nodes", "get"),
                     ("nodes", "patch"), ("events", "create")}


def test_render_options() -> None:
    sm = render(api_versions=("monitoring.coreos.com/v1/ServiceMonitor",))
    assert any(d["kind"] == "ServiceMonitor" for d in sm)
    docs = render("agent.jtop.enabled=true", "agent.jtop.gid=998", "worker.namespaces={ml}",
                  "operator.enabled=false", "dashboards.enabled=false")
    kinds = [d["kind"] for d in docs]
    assert "Deployment" not in kinds and "ConfigMap" not in kinds
    pod = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    assert pod["securityContext"]["supplementalGroups"] == [998]
    assert any(v["name"] == "jtop-socket" for v in pod["volumes"])
    assert any(d["kind"] == "RoleBinding" and d["metadata"]["namespace"] == "ml" for d in docs)


def test_schema_rejects_bad_values() -> None:
    out = helm("template", "t", str(CHART), "--kube-version", KUBE_VERSION,
               "--set", "agent.powerBackend=nvml", check=False)
    assert out.returncode != 0 and "powerBackend" in out.stderr
    out = helm("template", "t", str(CHART), "--kube-version", KUBE_VERSION,
               "--set", "agent.guard.windowSeconds=0", check=False)
    assert out.returncode != 0 and "windowSeconds" in out.stderr


@pytest.fixture
def release(cluster: LocalCluster, vnodes: VNodeAgent, kube: KubeClient, namespace: str,
            ) -> Iterator[dict[str, Any]]:
    port = free_ports(1)[0]
    name = "et"
    helm("install", name, str(CHART), "-n", namespace, "--wait", "--timeout", "120s",
         "--set", f"agent.metrics.port={port}",
         "--set-json", "agent.guard.windowSeconds=1",
         "--set-json", "agent.tickSeconds=0.2",
         "--set-json", f'agent.nodeSelector={{"kubernetes.io/hostname":"{NODE}"}}',
         # The operator runs in-cluster too (a job through it: test_end_to_end.py).
         "--set", f"operator.settings.namespaces={{{namespace}}}",
         kubeconfig=cluster.kubeconfig)
    try:
        yield {"name": name, "namespace": namespace, "port": port}
    finally:
        helm("uninstall", name, "-n", namespace, "--wait", "--timeout", "60s",
             kubeconfig=cluster.kubeconfig, check=False)
        wait_until(lambda: not kube.get(api_path("v1", "pods", namespace),
                                        labelSelector="app.kubernetes.io/instance=et")["items"],
                   30, "release pods gone")


def ready(address: str, port: int) -> bool:
    try:
        return httpx.get(f"http://{address}:{port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def can_i(cluster: LocalCluster, sa: str, verb: str, resource: str) -> bool:
    out = subprocess.run([str(binaries.kubectl()), "--kubeconfig", str(cluster.kubeconfig),
                          "auth", "can-i", verb, resource, "--as", sa],
                         capture_output=True, text=True, timeout=30)
    return out.stdout.strip() == "yes"


def test_install_runs_the_agent_with_its_service_account(
        cluster: LocalCluster, kube: KubeClient, vnodes: VNodeAgent,
        release: dict[str, Any]) -> None:
    ns, port = release["namespace"], release["port"]
    crd = kube.get_or_none(api_path("apiextensions.k8s.io/v1", "customresourcedefinitions",
                                    name="powerawaretrainingjobs.edgetrain.io"))
    assert crd is not None  # installed from the chart's crds/
    pods = kube.get(api_path("v1", "pods", ns),
                    labelSelector="app.kubernetes.io/component=node-agent")["items"]
    assert [p["spec"]["nodeName"] for p in pods] == [NODE]
    agent_pod = pods[0]
    assert agent_pod["spec"]["serviceAccountName"] == "et-edgetrain-node-agent"
    address = next(n for n in vnodes.nodes if n.name == NODE).address
    assert agent_pod["status"]["podIP"] == address  # its node's own address
    try:
        wait_until(lambda: ready(address, port), 30, "agent ready")
    except TimeoutError:
        pod = kube.get(api_path("v1", "pods", ns, agent_pod["metadata"]["name"]))
        raise AssertionError(container_log(pod, "node-agent").read_text()[-3000:]) from None
    text = httpx.get(f"http://{address}:{port}/metrics").text
    assert f'edgetrain_node_info{{device_model="jetson-nano",l4t="32.7.1",node="{NODE}"' in text
    # It patched its Node with the ServiceAccount token (the virtual node never sets this).
    node = kube.get(api_path("v1", "nodes", name=NODE))
    assert node["metadata"]["annotations"]["edgetrain.io/node-agent"] == "running"
    # RBAC: what it needs, and nothing more.
    sa = f"system:serviceaccount:{ns}:et-edgetrain-node-agent"
    assert can_i(cluster, sa, "watch", "pods") and can_i(cluster, sa, "patch", "nodes")
    assert can_i(cluster, sa, "create", "events")
    assert not can_i(cluster, sa, "get", "secrets")
    assert not can_i(cluster, sa, "delete", "pods")
    assert not can_i(cluster, sa, "create", "pods")
    # Pin and restore through the chart's agent.
    nano = next(n for n in vnodes.nodes if n.name == NODE)
    dev = GpuDevfreq.discover(nano.host_root)
    before = dev.current_range()
    kube.create(api_path("v1", "pods", ns), sleeper_pod("train", NODE, 4, freq_hz=537_600_000))
    wait_until(lambda: dev.current_range().max_freq_hz == 537_600_000
               and dev.current_range().min_freq_hz == 537_600_000, 20, "pinned by the chart agent")
    found = wait_until(lambda: events(kube, ns, "GpuFrequencyPinned"), 10, "pin event")
    assert found[0]["source"]["component"] == "edgetrain-node-agent"
    wait_until(lambda: dev.current_range() == before, 30, "restored after the pod")
    # The operator's ServiceAccount has what its phases need and no more.
    osa = f"system:serviceaccount:{ns}:et-edgetrain-operator"
    for verb, res in (("watch", "powerawaretrainingjobs.edgetrain.io"),
                      ("patch", "powerawaretrainingjobs.edgetrain.io/status"),
                      ("create", "jobs.batch"), ("create", "daemonsets.apps"),
                      ("create", "configmaps"), ("list", "nodes"), ("create", "roles"),
                      ("create", "events")):
        assert can_i(cluster, osa, verb, res), (verb, res)
    assert not can_i(cluster, osa, "get", "secrets")
    assert not can_i(cluster, osa, "patch", "nodes")


def test_schema_rejects_an_image_that_cannot_be_pulled() -> None:
    out = helm("template", "t", str(CHART), "--kube-version", KUBE_VERSION,
               "--set", "operator.image.repository=Bad Repo", check=False)
    assert out.returncode != 0 and "/operator/image/repository" in out.stderr


def test_a_node_selector_matching_no_node_fails_the_install(
        cluster: LocalCluster, vnodes: VNodeAgent, namespace: str) -> None:
    out = helm("install", "nomatch", str(CHART), "-n", namespace, "--dry-run=server",
               "--set-json", 'agent.nodeSelector={"edgetrain.io/device-model":"jetson-nanoo"}',
               kubeconfig=cluster.kubeconfig, check=False)
    assert out.returncode != 0
    assert re.search(r'agent.nodeSelector \{[^}]*"jetson-nanoo"[^}]*\} matches no Node',
                     out.stderr), out.stderr
    ok = helm("install", "match", str(CHART), "-n", namespace, "--dry-run=server",
              kubeconfig=cluster.kubeconfig, check=False)
    assert ok.returncode == 0, ok.stderr
    later = helm("install", "later", str(CHART), "-n", namespace, "--dry-run=server",
                 "--set-json", 'agent.nodeSelector={"edgetrain.io/device-model":"jetson-agx"}',
                 "--set", "checkNodeSelectors=false",  # the Jetsons join after the install
                 kubeconfig=cluster.kubeconfig, check=False)
    assert later.returncode == 0, later.stderr
