"""The Helm chart: lint, render, and a real `helm install` into the local API server where the
node agent runs on a real Jetson node (arm64 under QEMU, its image imported from podman) with
its own ServiceAccount token (not as admin), and the operator on a real server node."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from edgetrain.cluster import KubeApiError, KubeClient, LocalCluster, api_path, binaries
from edgetrain.cluster.controlplane import free_ports
from edgetrain.device import GpuDevfreq
from edgetrain.device.sim import BOARDS
from edgetrain.operator.settings import load_settings
from tests.cluster.fixtures import (
    CHECKPOINT_CLAIM,
    FLEET_CHART_SETS,
    NANO,
    SERVER_NAMES,
    hostpath_claim,
)
from tests.cluster.realnodes import RealCluster
from tests.helpers import http_get, pod_log
from tests.node_agent.helpers import events, sleeper_pod, wait_until

CHART = Path(__file__).resolve().parents[2] / "charts" / "edgetrain"
KUBE_VERSION = binaries.K8S_VERSION.lstrip("v")
NODE = NANO
# The chart's operator runs on the second server (the first holds the estimator).
OPERATOR_NODE = SERVER_NAMES[1]


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
        args += [s] if s.startswith("--set-json=") else ["--set", s]
    for a in api_versions:
        args += ["--api-versions", a]
    return [d for d in yaml.safe_load_all(helm(*args).stdout) if d]


OPT_OUT = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "edgetrain.io/node-agent", "operator": "NotIn", "values": ["disabled"]}]}]}}}


def _boards(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-board agent DaemonSets (not the detect step's)."""
    return [d for d in docs if d["kind"] == "DaemonSet"
            and "edgetrain.io/board" in d["metadata"]["labels"]]


def test_the_detect_step_runs_on_every_arm64_node_with_least_privilege() -> None:
    """Whatever labels a node has: arm64 and not opted out. An init container labels the
    board from the host's device tree (read-only, at a path the runtime does not mask), as
    UID 65532 without capabilities; then the pod idles."""
    (ds,) = [d for d in render() if d["kind"] == "DaemonSet"
             and d["metadata"]["name"] == "t-edgetrain-node-detect"]
    assert ds["metadata"]["labels"]["app.kubernetes.io/component"] == "node-detect"
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
    assert pod["affinity"] == OPT_OUT
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsNonRoot"]) == (
        65532, True)
    (init,) = pod["initContainers"]
    assert init["command"] == ["edgetrain", "node-agent"]
    assert {"--detect-only", "--device-tree=/host/firmware/devicetree/base"} <= set(
        init["args"])
    assert init["volumeMounts"][1] == {"name": "firmware", "mountPath": "/host/firmware",
                                       "readOnly": True}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["firmware"]["hostPath"] == {"path": "/sys/firmware", "type": "Directory"}
    (idle,) = pod["containers"]
    assert idle["command"] == ["sleep", "infinity"]
    # `sleep` as PID 1 ignores SIGTERM: a long grace would hold every uninstall 30 s per node.
    assert pod["terminationGracePeriodSeconds"] <= 2
    for c in (init, idle):
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
    # Your own nodeAffinity replaces the opt-out term.
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "site", "operator": "In", "values": ["a"]}]}]}}}
    docs = render(f"--set-json=agent.affinity={json.dumps(own)}")
    assert all(d["spec"]["template"]["spec"]["affinity"] == own
               for d in docs if d["kind"] == "DaemonSet")


def test_each_role_has_its_image_and_platforms() -> None:
    docs = render("images.trainer.tag=0.1.0-jp62", "image.registry=reg.lan/et")
    op = next(d for d in docs if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in op["spec"]["template"]["spec"]["containers"][0]
           ["env"]}
    assert env["EDGETRAIN_OPERATOR_ESTIMATOR_IMAGE"].startswith("reg.lan/et/estimator:")
    assert env["EDGETRAIN_OPERATOR_TRAINER_IMAGE"] == "reg.lan/et/trainer:0.1.0-jp62"
    assert env["EDGETRAIN_OPERATOR_ESTIMATOR_PLATFORMS"] == "linux/amd64"
    assert env["EDGETRAIN_OPERATOR_TRAINER_PLATFORMS"] == "linux/arm64"
    assert env["EDGETRAIN_OPERATOR_SERVER_SELECTOR"] == ""
    assert "EDGETRAIN_OPERATOR_IMAGE" not in env


def test_helm_lint_is_clean() -> None:
    out = helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in out.stdout
    assert "[WARNING]" not in out.stdout and "[ERROR]" not in out.stdout, out.stdout


def test_render_defaults() -> None:
    docs = render()
    kinds = sorted(d["kind"] for d in docs)
    assert "ServiceMonitor" not in kinds  # its CRD is not installed
    daemonsets = {d["metadata"]["labels"]["edgetrain.io/board"]: d for d in _boards(docs)}
    assert set(daemonsets) == set(BOARDS) and kinds.count("Deployment") == 1
    ds = daemonsets["jetson-nano"]
    assert ds["metadata"]["namespace"] == "edgetrain-node-agent"
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["command"] == ["edgetrain", "node-agent"]
    # The device model the detect step set, on arm64, never where agents are opted out.
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "arm64",
                                   "edgetrain.io/device-model": "jetson-nano"}
    assert pod["affinity"] == OPT_OUT
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


def test_node_agent_is_not_privileged() -> None:
    """All of /sys read-only, the board's GPU devfreq directory (the twin's path for that board)
    read-write, root without capabilities, read-only root file system, RuntimeDefault seccomp,
    limits on CPU, memory and ephemeral storage, the token mounted explicitly."""
    docs = render()
    for ds in _boards(docs):
        board = ds["metadata"]["labels"]["edgetrain.io/board"]
        pod = ds["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        sc = c["securityContext"]
        assert sc == {"privileged": False, "allowPrivilegeEscalation": False,
                      "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True}
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        spec = BOARDS[board]
        devfreq = f"/{spec.gpu_device_dir}/devfreq/{spec.devfreq_name}"
        volumes = {v["name"]: v for v in pod["volumes"]}
        writable = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")}
        assert writable == {devfreq, "/var/lib/edgetrain"}, board
        assert volumes["gpu-devfreq"]["hostPath"] == {"path": devfreq, "type": "Directory"}
        mounts = {m["mountPath"]: m.get("readOnly") for m in c["volumeMounts"]}
        assert mounts["/sys"] is True and mounts["/host/firmware"] is True
        assert "--device-tree=/host/firmware/devicetree/base" in c["args"]
        for kind in ("requests", "limits"):
            assert set(c["resources"][kind]) == {"cpu", "memory", "ephemeral-storage"}
    ns = next(d for d in docs if d["kind"] == "Namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    # A board that needs it, and only that one, can be privileged.
    docs = render("agent.boards.jetson-tx2-nx.privileged=true")
    priv = {d["metadata"]["labels"]["edgetrain.io/board"] for d in _boards(docs)
            if d["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"]}
    assert priv == {"jetson-tx2-nx"}


def test_power_modes_mount_only_the_cpu_and_emc_controls_of_that_board() -> None:
    """agent.boards.<board>.powerModes: the CPU controls and the twin's EMC debugfs path of that
    board also read-write; the other boards keep only the devfreq directory."""
    docs = render("agent.boards.jetson-orin-nano.powerModes=true")
    for ds in _boards(docs):
        board = ds["metadata"]["labels"]["edgetrain.io/board"]
        (c,) = ds["spec"]["template"]["spec"]["containers"]
        writable = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")}
        extra = writable - {"/var/lib/edgetrain"}
        spec = BOARDS[board]
        devfreq = f"/{spec.gpu_device_dir}/devfreq/{spec.devfreq_name}"
        if board == "jetson-orin-nano":
            assert extra == {devfreq, "/sys/devices/system/cpu", f"/{spec.emc_debugfs_dir}"}
        else:
            assert extra == {devfreq}, board


def test_operator_pod_is_restricted() -> None:
    (dep,) = [d for d in render() if d["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["securityContext"]["runAsUser"] >= 10000
    assert pod["securityContext"]["runAsGroup"] >= 10000
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False
    for kind in ("requests", "limits"):
        assert set(c["resources"][kind]) == {"cpu", "memory", "ephemeral-storage"}


def test_network_policies() -> None:
    docs = render()
    pols = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"]
            for d in docs if d["kind"] == "NetworkPolicy"}
    assert set(pols) == {"operator", "node-agent", "node-detect"}
    op, agent = pols["operator"], pols["node-agent"]
    # The operator: egress to the API server's ports and to the agents' metrics port (a
    # budget's measured draw), ingress for the kubelet's probes.
    api = {"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]}
    agents = {"namespaceSelector": {"matchLabels": {
                  "kubernetes.io/metadata.name": "edgetrain-node-agent"}},
              "podSelector": {"matchLabels": {"app.kubernetes.io/name": "edgetrain",
                                              "app.kubernetes.io/instance": "t",
                                              "app.kubernetes.io/component": "node-agent"}}}
    assert op["policyTypes"] == ["Ingress", "Egress"]
    assert op["egress"] == [api, {"ports": [{"protocol": "TCP", "port": 9400}],
                                  "to": [agents]}]
    assert op["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8080}]}]
    # The agent: scrapes on its metrics port only.
    assert agent["ingress"] == [{"ports": [{"protocol": "TCP", "port": 9400}]}]
    assert agent["egress"] == [api]
    # The detect step accepts nothing and reaches the API server only.
    assert pols["node-detect"]["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in pols["node-detect"] and pols["node-detect"]["egress"] == [api]
    # Host-network agents listen on their node's address: any address, that port only.
    hostnet = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"]
               for d in render("agent.hostNetwork=true") if d["kind"] == "NetworkPolicy"}
    assert hostnet["operator"]["egress"][1] == {"ports": [{"protocol": "TCP", "port": 9400}]}
    # Scrapes narrowed to Prometheus still let the operator in.
    narrowed_from = render('networkPolicy.metricsFrom[0].podSelector.matchLabels.app=prometheus')
    (peers,) = [d["spec"]["ingress"][0]["from"] for d in narrowed_from
                if d["kind"] == "NetworkPolicy"
                and d["metadata"]["labels"]["app.kubernetes.io/component"] == "node-agent"]
    assert peers == [{"podSelector": {"matchLabels": {"app": "prometheus"}}},
                     {"namespaceSelector": {"matchLabels": {
                         "kubernetes.io/metadata.name": "edgetrain"}},
                      "podSelector": {"matchLabels": {"app.kubernetes.io/name": "edgetrain",
                                                      "app.kubernetes.io/instance": "t",
                                                      "app.kubernetes.io/component": "operator"}}}]
    narrowed = render("networkPolicy.apiServer.cidrs={10.0.0.1/32}")
    np = next(d for d in narrowed if d["kind"] == "NetworkPolicy")
    assert np["spec"]["egress"][0]["to"] == [{"ipBlock": {"cidr": "10.0.0.1/32"}}]
    assert not [d for d in render("networkPolicy.enabled=false") if d["kind"] == "NetworkPolicy"]


def test_operator_rbac_creates_no_rbac_and_reads_no_secrets() -> None:
    docs = render("worker.namespaces={ml,vision}")
    role = next(d for d in docs if d["kind"] == "ClusterRole"
                and d["metadata"]["name"].endswith("-operator"))
    resources = {res for r in role["rules"] for res in r["resources"]}
    assert not resources & {"roles", "rolebindings", "clusterroles", "clusterrolebindings",
                            "secrets", "pods/exec"}
    assert not any("*" in r["verbs"] or "*" in r["resources"] for r in role["rules"])
    sa_rule = next(r for r in role["rules"] if r["resources"] == ["serviceaccounts"])
    assert sa_rule["verbs"] == ["get"]
    bindings = {(d["metadata"]["namespace"], d["roleRef"]["name"])
                for d in docs if d["kind"] == "RoleBinding"}
    # Worker identities where the values say, and the operator's own Lease in its namespace.
    assert bindings == {("ml", "t-edgetrain-worker"), ("vision", "t-edgetrain-worker"),
                        ("edgetrain", "t-edgetrain-operator-leader-election")}


@pytest.mark.parametrize(("sets", "by_agent"), [
    ((), True), (("agent.enabled=false",), False),
    (("operator.settings.profileClocksByAgent=false",), False)])
def test_profile_pods_ask_the_agent_only_where_it_runs(sets: tuple[str, ...],
                                                       by_agent: bool) -> None:
    """Profile pods ask the chart's node agent for clocks (and may annotate pods for it) only
    where the chart runs agents; otherwise the worker identity stays ConfigMaps only."""
    docs = render("worker.namespaces={ml}", *sets)
    op = next(d for d in docs if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in op["spec"]["template"]["spec"]["containers"][0]
           ["env"]}
    assert env["EDGETRAIN_OPERATOR_PROFILE_CLOCKS_BY_AGENT"] == str(by_agent).lower()
    worker = next(d for d in docs if d["kind"] == "ClusterRole"
                  and d["metadata"]["name"].endswith("-worker"))
    assert ({"resources": ["pods"], "verbs": ["patch"], "apiGroups": [""]}
            in worker["rules"]) is by_agent


def test_render_options() -> None:
    sm = render(api_versions=("monitoring.coreos.com/v1/ServiceMonitor",))
    assert any(d["kind"] == "ServiceMonitor" for d in sm)
    docs = render("agent.jtop.enabled=true", "agent.jtop.gid=998", "worker.namespaces={ml}",
                  "operator.enabled=false", "dashboards.enabled=false")
    kinds = [d["kind"] for d in docs]
    assert "Deployment" not in kinds and "ConfigMap" not in kinds
    pod = _boards(docs)[0]["spec"]["template"]["spec"]
    assert pod["securityContext"]["supplementalGroups"] == [998]
    assert any(v["name"] == "jtop-socket" for v in pod["volumes"])
    assert any(d["kind"] == "RoleBinding" and d["metadata"]["namespace"] == "ml" for d in docs)


def test_chart_linter_is_clean_and_every_ignored_check_is_justified() -> None:
    """kube-score (installed by `make setup`) on the rendered chart: no finding left but those
    an object ignores by a `kube-score/ignore` annotation, each explained in values.yaml."""
    root = CHART.parents[1]
    out = subprocess.run(["bash", str(root / "scripts" / "lint-chart.sh")], capture_output=True,
                         text=True, timeout=300, env=dict(os.environ, PYTHON=sys.executable))
    assert out.returncode == 0, out.stdout + out.stderr
    ignored = {check for d in render() for check in
               ((d["metadata"].get("annotations") or {}).get("kube-score/ignore", "")).split(",")
               if check}
    assert ignored == {"container-image-pull-policy", "container-security-context-user-group-id",
                       "pod-probes-identical"}
    values = (CHART / "values.yaml").read_text()
    for check in ignored:
        assert f"kube-score {check}" in values, f"{check} is ignored without a reason"


def test_schema_rejects_bad_values() -> None:
    out = helm("template", "t", str(CHART), "--kube-version", KUBE_VERSION,
               "--set", "agent.powerBackend=nvml", check=False)
    assert out.returncode != 0 and "powerBackend" in out.stderr
    out = helm("template", "t", str(CHART), "--kube-version", KUBE_VERSION,
               "--set", "agent.guard.windowSeconds=0", check=False)
    assert out.returncode != 0 and "windowSeconds" in out.stderr
    out = helm("template", "t", str(CHART), "--kube-version", KUBE_VERSION,
               "--set", "operator.settings.estimateParallelism=0", check=False)
    assert out.returncode != 0 and "estimateParallelism" in out.stderr


def test_estimate_parallelism_and_worker_threads_reach_the_operator() -> None:
    def env(*sets: str) -> dict[str, str]:
        dep = next(d for d in render(*sets) if d["kind"] == "Deployment")
        return {e["name"]: e.get("value") for e in
                dep["spec"]["template"]["spec"]["containers"][0]["env"]}

    key = "EDGETRAIN_OPERATOR_ESTIMATE_PARALLELISM"
    assert env()[key] == "8"
    assert env("operator.settings.estimateParallelism=2")[key] == "2"
    # The workloads' threads: unset by default (each pod's cores), a number where asked.
    threads = "EDGETRAIN_OPERATOR_WORKER_THREADS"
    assert load_settings({threads: env()[threads]}).worker_threads is None
    assert load_settings({threads: env("operator.settings.workerThreads=1")[threads]}
                         ).worker_threads == 1


RESTRICTED = "pod-security.kubernetes.io/enforce"


@contextlib.contextmanager
def restricted_release(kube: KubeClient, namespace: str, checkpoints: Path) -> Iterator[str]:
    """What the README does before installing: the operator's namespace enforces `restricted`.
    Jobs go to a namespace of their own (the README's `edgetrain-jobs`), which enforces
    `restricted` too (the worker pods meet it) and claims checkpoint storage on `checkpoints`,
    a directory every node shares (`CHART_CHECKPOINTS` names the claim to the chart); yields
    its name and deletes it."""
    kube.patch(api_path("v1", "namespaces", name=namespace),
               {"metadata": {"labels": {RESTRICTED: "restricted"}}}, "merge")
    jobs = f"{namespace}-jobs"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": jobs, "labels": {RESTRICTED: "restricted"}}})
    try:
        kube.wait_for(api_path("v1", "serviceaccounts", jobs, "default"), lambda _sa: True,
                      timeout_s=30, what="default ServiceAccount")
        with hostpath_claim(kube, jobs, checkpoints, wait=False):
            yield jobs
    finally:
        kube.delete_ignore_missing(api_path("v1", "namespaces", name=jobs))


# The chart values of `restricted_release`'s claim: training checkpoints there.
CHART_CHECKPOINTS = ("--set", f"operator.settings.checkpointPvc={CHECKPOINT_CLAIM}")


def chart_nodes(fleet: RealCluster) -> tuple[str, ...]:
    """The images a release runs, in the nodes it runs them on (the Jetsons' agent and trainer
    come with `trainer_images`); the chart values that place the operator there."""
    fleet.need([OPERATOR_NODE], ("operator",), "linux/amd64")
    return ("--set-json",
            f'operator.nodeSelector={{"kubernetes.io/hostname":"{OPERATOR_NODE}"}}',
            *FLEET_CHART_SETS)


@pytest.fixture
def release(cluster: LocalCluster, trainer_images: RealCluster, kube: KubeClient,
            namespace: str, checkpoint_root: Path) -> Iterator[dict[str, Any]]:
    port = free_ports(1)[0]
    name = "et"
    placed = chart_nodes(trainer_images)
    with restricted_release(kube, namespace, checkpoint_root) as jobs:
        yield from _installed(cluster, kube, name, namespace, jobs, port, placed)


def _installed(cluster: LocalCluster, kube: KubeClient, name: str, namespace: str, jobs: str,
               port: int, placed: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    helm("install", name, str(CHART), "-n", namespace, "--wait", "--timeout", "170s", *placed,
         "--set", f"agent.metrics.port={port}",
         "--set-json", "agent.guard.windowSeconds=1",
         "--set-json", "agent.tickSeconds=0.2",
         "--set-json", f'agent.nodeSelector={{"kubernetes.io/hostname":"{NODE}"}}',
         # The operator runs in-cluster too (a job through it: test_end_to_end.py).
         "--set", f"operator.settings.namespaces={{{jobs}}}",
         "--set", f"worker.namespaces={{{jobs}}}", *CHART_CHECKPOINTS,
         kubeconfig=cluster.kubeconfig)
    try:
        yield {"name": name, "namespace": namespace, "port": port, "jobs": jobs,
               "agent_namespace": f"{namespace}-node-agent"}
    finally:
        helm("uninstall", name, "-n", namespace, "--wait", "--timeout", "60s",
             kubeconfig=cluster.kubeconfig, check=False)
        wait_until(lambda: not kube.get("/api/v1/pods",
                                        labelSelector="app.kubernetes.io/instance=et")["items"],
                   60, "release pods gone")


def ready(address: str, port: int) -> bool:
    try:
        return http_get(f"http://{address}:{port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def can_i(cluster: LocalCluster, sa: str, verb: str, resource: str, namespace: str = "default",
          ) -> bool:
    out = subprocess.run([str(binaries.kubectl()), "--kubeconfig", str(cluster.kubeconfig),
                          "auth", "can-i", verb, resource, "--as", sa, "-n", namespace],
                         capture_output=True, text=True, timeout=30)
    return out.stdout.strip() == "yes"


def node_address(kube: KubeClient, name: str) -> str:
    """A Node's InternalIP (where its kubelet and hostNetwork pods serve)."""
    node = kube.get(api_path("v1", "nodes", name=name))
    return next(str(a["address"]) for a in node["status"]["addresses"]
                if a["type"] == "InternalIP")


def test_install_runs_the_agent_with_its_service_account(
        cluster: LocalCluster, kube: KubeClient, trainer_images: RealCluster,
        release: dict[str, Any]) -> None:
    port, agent_ns = release["port"], release["agent_namespace"]
    crd = kube.get_or_none(api_path("apiextensions.k8s.io/v1", "customresourcedefinitions",
                                    name="powerawaretrainingjobs.edgetrain.io"))
    assert crd is not None  # installed from the chart's crds/
    # The agent runs in its own namespace, the only one at the `privileged` level.
    labels = kube.get(api_path("v1", "namespaces", name=agent_ns))["metadata"]["labels"]
    assert labels[RESTRICTED] == "privileged"
    pods = kube.get(api_path("v1", "pods", agent_ns),
                    labelSelector="app.kubernetes.io/component=node-agent")["items"]
    assert [p["spec"]["nodeName"] for p in pods] == [NODE]
    agent_pod = pods[0]
    assert agent_pod["spec"]["serviceAccountName"] == "et-edgetrain-node-agent"
    assert agent_pod["spec"]["containers"][0]["securityContext"]["privileged"] is False
    # Its own address on its node's pod network (the chart's agent.hostNetwork is off).
    address = agent_pod["status"]["podIP"]
    assert address != node_address(kube, NODE)
    try:
        wait_until(lambda: ready(address, port), 30, "agent ready")
    except TimeoutError:
        pod = kube.get(api_path("v1", "pods", agent_ns, agent_pod["metadata"]["name"]))
        raise AssertionError(pod_log(kube, pod, "node-agent")[-3000:]) from None
    text = http_get(f"http://{address}:{port}/metrics").text
    assert f'edgetrain_node_info{{device_model="jetson-nano",l4t="32.7.1",node="{NODE}"' in text
    # It patched its Node with the ServiceAccount token (the kubelet never sets this).
    node = kube.get(api_path("v1", "nodes", name=NODE))
    assert node["metadata"]["annotations"]["edgetrain.io/node-agent"] == "running"
    # RBAC: what it needs, and nothing more.
    sa = f"system:serviceaccount:{agent_ns}:et-edgetrain-node-agent"
    assert can_i(cluster, sa, "watch", "pods") and can_i(cluster, sa, "patch", "nodes")
    assert can_i(cluster, sa, "create", "events")
    assert not can_i(cluster, sa, "get", "secrets")
    assert not can_i(cluster, sa, "delete", "pods")
    assert not can_i(cluster, sa, "create", "pods")
    # Pin and restore through the chart's agent, whose /sys is read-only but for devfreq.
    dev = GpuDevfreq.discover(trainer_images.node(NODE).dir / "twin")
    before = dev.current_range()
    jobs = release["jobs"]
    kube.create(api_path("v1", "pods", jobs), sleeper_pod("train", NODE, 4, freq_hz=537_600_000))
    wait_until(lambda: dev.current_range().max_freq_hz == 537_600_000
               and dev.current_range().min_freq_hz == 537_600_000, 20, "pinned by the chart agent")
    found = wait_until(lambda: events(kube, jobs, "GpuFrequencyPinned"), 10, "pin event")
    assert found[0]["source"]["component"] == "edgetrain-node-agent"
    wait_until(lambda: dev.current_range() == before, 30, "restored after the pod")


def test_operator_is_admitted_as_restricted_with_only_its_rbac(
        cluster: LocalCluster, kube: KubeClient, release: dict[str, Any]) -> None:
    ns = release["namespace"]
    # PodSecurity admission enforces `restricted` here: a pod that asks for more is refused...
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "too-much"},
           "spec": {"containers": [{"name": "c", "image": "x", "command": ["true"],
                                    "securityContext": {"privileged": True}}]}}
    with pytest.raises(KubeApiError) as err:
        kube.create(api_path("v1", "pods", ns), bad)
    assert err.value.code == 403 and "restricted" in err.value.message
    # ...and the chart's operator was admitted and runs, as UID 65532.
    (op,) = kube.get(api_path("v1", "pods", ns),
                     labelSelector="app.kubernetes.io/component=operator")["items"]
    assert op["status"]["phase"] == "Running"
    assert op["spec"]["securityContext"]["runAsUser"] == 65532
    assert op["spec"]["automountServiceAccountToken"] is False
    # The operator's ServiceAccount has what its phases need and no more.
    osa = f"system:serviceaccount:{ns}:et-edgetrain-operator"
    for verb, res in (("watch", "powerawaretrainingjobs.edgetrain.io"),
                      ("patch", "powerawaretrainingjobs.edgetrain.io/status"),
                      ("create", "jobs.batch"), ("create", "daemonsets.apps"),
                      ("create", "configmaps"), ("list", "nodes"), ("get", "serviceaccounts"),
                      ("patch", "pods"), ("create", "events"),
                      # a worker refused at admission: its Job's FailedCreate Events
                      ("list", "events"),
                      # the operator's indexes: label-filtered watches instead of per-tick lists
                      ("watch", "nodes"), ("watch", "configmaps"), ("watch", "jobs.batch"),
                      ("watch", "daemonsets.apps"),
                      # the training tick's own objects: training pods from a watch
                      ("watch", "pods"),
                      # site power budgets: their loops, status, and the jobs' share annotations
                      ("watch", "powerbudgets.edgetrain.io"),
                      ("patch", "powerbudgets.edgetrain.io/status"),
                      ("patch", "powerawaretrainingjobs.edgetrain.io")):
        assert can_i(cluster, osa, verb, res), (verb, res)
    for verb, res in (("create", "powerbudgets.edgetrain.io"),
                      ("delete", "powerbudgets.edgetrain.io")):
        assert not can_i(cluster, osa, verb, res), (verb, res)
    for verb, res in (("get", "secrets"), ("list", "secrets"), ("create", "roles"),
                      ("create", "rolebindings"), ("create", "clusterroles"),
                      ("create", "clusterrolebindings"), ("bind", "clusterroles"),
                      ("escalate", "roles"), ("create", "pods/exec"),
                      ("create", "serviceaccounts"), ("create", "serviceaccounts/token"),
                      ("patch", "nodes"), ("delete", "pods"), ("create", "pods")):
        assert not can_i(cluster, osa, verb, res), (verb, res)
    # The worker identity of the job namespace came from the chart: ConfigMaps, and patching
    # pods there (a profile pod's clock request to the node agent, on itself).
    jobs = release["jobs"]
    wsa = f"system:serviceaccount:{jobs}:edgetrain-worker"
    assert can_i(cluster, wsa, "create", "configmaps", jobs)
    assert can_i(cluster, wsa, "patch", "pods", jobs)
    assert not can_i(cluster, wsa, "create", "configmaps", ns)  # its own namespace only
    assert not can_i(cluster, wsa, "patch", "pods", ns)
    assert not can_i(cluster, wsa, "get", "secrets", jobs)
    assert not can_i(cluster, wsa, "create", "pods", jobs)
    assert not can_i(cluster, wsa, "delete", "pods", jobs)
    # The NetworkPolicies were accepted by the API server as rendered (no CNI here enforces
    # them: docs/operator.md says so).
    pols = kube.get(api_path("networking.k8s.io/v1", "networkpolicies", ns))["items"]
    assert [p["spec"]["egress"][0]["ports"][0]["port"] for p in pols] == [443]
    agent_pols = kube.get(api_path("networking.k8s.io/v1", "networkpolicies",
                                   release["agent_namespace"]))["items"]
    assert agent_pols[0]["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": release["port"]}]}]


def test_schema_rejects_an_image_that_cannot_be_pulled() -> None:
    out = helm("template", "t", str(CHART), "--kube-version", KUBE_VERSION,
               "--set", "operator.image.repository=Bad Repo", check=False)
    assert out.returncode != 0 and "/operator/image/repository" in out.stderr


def test_a_node_selector_matching_no_node_fails_the_install(
        cluster: LocalCluster, real_fleet: RealCluster, namespace: str) -> None:
    out = helm("install", "nomatch", str(CHART), "-n", namespace, "--dry-run=server",
               *FLEET_CHART_SETS,
               "--set-json", 'agent.nodeSelector={"edgetrain.io/device-model":"jetson-nanoo"}',
               kubeconfig=cluster.kubeconfig, check=False)
    assert out.returncode != 0
    assert re.search(r'agent.nodeSelector \{[^}]*"jetson-nanoo"[^}]*\} matches no Node',
                     out.stderr), out.stderr
    ok = helm("install", "match", str(CHART), "-n", namespace, "--dry-run=server",
              *FLEET_CHART_SETS,
              kubeconfig=cluster.kubeconfig, check=False)
    assert ok.returncode == 0, ok.stderr
    later = helm("install", "later", str(CHART), "-n", namespace, "--dry-run=server",
                 *FLEET_CHART_SETS,
                 "--set-json", 'agent.nodeSelector={"edgetrain.io/device-model":"jetson-agx"}',
                 "--set", "checkNodeSelectors=false",  # the Jetsons join after the install
                 kubeconfig=cluster.kubeconfig, check=False)
    assert later.returncode == 0, later.stderr


def test_worker_namespaces_by_label_at_install(
        cluster: LocalCluster, kube: KubeClient, real_fleet: RealCluster, namespace: str,
) -> None:
    """worker.namespaceSelector: the chart finds the labelled namespaces when installed (Helm's
    lookup) and gives each the worker ServiceAccount and RoleBinding; others get none."""
    kube.patch(api_path("v1", "namespaces", name=namespace),
               {"metadata": {"labels": {"edgetrain.io/workers": "enabled"}}}, "merge")
    out = helm("install", "bylabel", str(CHART), "-n", namespace, "--dry-run=server",
               *FLEET_CHART_SETS,
               "--set-json", 'worker.namespaceSelector={"edgetrain.io/workers":"enabled"}',
               kubeconfig=cluster.kubeconfig)
    manifest = out.stdout.split("MANIFEST:", 1)[1].split("NOTES:", 1)[0]
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    assert {(d["kind"], d["metadata"]["namespace"]) for d in docs
            if d["kind"] in ("RoleBinding", "ServiceAccount")
            and d["metadata"]["name"] == "edgetrain-worker"} == {
        ("RoleBinding", namespace), ("ServiceAccount", namespace)}
