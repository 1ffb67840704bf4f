"""Virtual nodes under the real scheduler and controllers: Jobs, DaemonSets, pod features."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from edgetrain.api.keys import LABEL_DEVICE_MODEL, LABEL_NODE_KIND
from edgetrain.api.pod_security import WORKER_GID, WORKER_UID
from edgetrain.cluster import KubeClient, VNodeAgent, api_path, container_log, node_specs
from edgetrain.cluster.vnode import prepare_shared_dir
from tests.cluster.fixtures import JETSON_COUNTS, SERVERS, nfs_claim

Obj = dict[str, Any]
PY = "python"  # mapped by the virtual node onto this interpreter


def _job(name: str, script: str, selector: dict[str, str], backoff_limit: int = 0) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {"spec": {
                "restartPolicy": "Never",
                "nodeSelector": selector,
                "containers": [{"name": "main", "image": "edgetrain:dev",
                                "command": [PY, "-c", script]}],
            }},
        },
    }


def _job_condition(kind: str) -> Any:
    def check(job: Obj) -> bool:
        return any(c["type"] == kind and c["status"] == "True"
                   for c in job.get("status", {}).get("conditions", []))
    return check


def _pods(kube: KubeClient, namespace: str, selector: str) -> list[Obj]:
    return list(kube.get(api_path("v1", "pods", namespace), labelSelector=selector)["items"])


def _wait_pod(kube: KubeClient, namespace: str, name: str, phases: tuple[str, ...],
              timeout_s: float = 60) -> Obj:
    return kube.wait_for(api_path("v1", "pods", namespace, name),
                         lambda p: p.get("status", {}).get("phase") in phases,
                         timeout_s=timeout_s, what=f"phase in {phases}")


def test_nodes_carry_jetson_labels_and_live_leases(vnodes: VNodeAgent, kube: KubeClient) -> None:
    nano = kube.get(api_path("v1", "nodes", name="vn-jetson-nano-0"))
    labels = nano["metadata"]["labels"]
    assert labels[LABEL_DEVICE_MODEL] == "jetson-nano"
    assert labels["edgetrain.io/l4t"].startswith("32.")
    assert labels["kubernetes.io/arch"] == "arm64"
    assert nano["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert nano["status"]["nodeInfo"]["architecture"] == "arm64"
    lease = kube.get(api_path("coordination.k8s.io/v1", "leases", "kube-node-lease",
                              "vn-jetson-nano-0"))
    assert lease["spec"]["holderIdentity"] == "vn-jetson-nano-0"
    server = kube.get(api_path("v1", "nodes", name="vn-gpu-server-0"))
    assert server["metadata"]["labels"][LABEL_NODE_KIND] == "server"


def test_job_succeeds_through_the_job_controller(vnodes: VNodeAgent, kube: KubeClient,
                                                 namespace: str) -> None:
    kube.create(api_path("batch/v1", "jobs", namespace),
                _job("ok", "print('hello from a virtual jetson')",
                     {LABEL_DEVICE_MODEL: "jetson-orin-nano"}))
    kube.wait_for(api_path("batch/v1", "jobs", namespace, "ok"), _job_condition("Complete"),
                  timeout_s=90, what="Complete")
    (pod,) = _pods(kube, namespace, "job-name=ok")
    assert pod["spec"]["nodeName"] == "vn-jetson-orin-nano-0"
    assert pod["status"]["phase"] == "Succeeded"
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["exitCode"], state["reason"]) == (0, "Completed")
    assert container_log(pod, "main").read_text().strip() == "hello from a virtual jetson"


def test_failing_command_gives_failed_pod_with_exit_code(vnodes: VNodeAgent, kube: KubeClient,
                                                         namespace: str) -> None:
    script = ("import sys; open('/dev/termination-log', 'w').write('out of memory (simulated)')"
              "; sys.exit(7)")
    kube.create(api_path("batch/v1", "jobs", namespace),
                _job("bad", script, {LABEL_DEVICE_MODEL: "jetson-nano"}))
    kube.wait_for(api_path("batch/v1", "jobs", namespace, "bad"), _job_condition("Failed"),
                  timeout_s=90, what="Failed")
    (pod,) = _pods(kube, namespace, "job-name=bad")
    assert pod["status"]["phase"] == "Failed"
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 7
    assert term["reason"] == "Error"
    assert term["message"] == "out of memory (simulated)"


def test_daemonset_runs_one_pod_per_jetson_node(vnodes: VNodeAgent, kube: KubeClient,
                                                namespace: str) -> None:
    kube.create(api_path("apps/v1", "daemonsets", namespace), {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "nodeSelector": {LABEL_NODE_KIND: "jetson"},
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{"name": "agent", "image": "edgetrain:dev",
                                    "command": [PY, "-c", "import time; time.sleep(600)"]}],
                },
            },
        },
    })
    jetsons = sum(JETSON_COUNTS.values())

    def all_running(ds: Obj) -> bool:
        st = ds.get("status", {})
        return st.get("desiredNumberScheduled") == jetsons and st.get("numberReady") == jetsons

    kube.wait_for(api_path("apps/v1", "daemonsets", namespace, "agent"), all_running,
                  timeout_s=90, what="one ready pod per Jetson node")
    pods = _pods(kube, namespace, "app=agent")
    assert len(pods) == jetsons
    assert {p["spec"]["nodeName"] for p in pods} == {
        f"vn-{board}-0" for board in JETSON_COUNTS}
    assert all(p["status"]["phase"] == "Running" for p in pods)
    assert SERVERS >= 1  # the GPU server exists but is not selected


def test_pod_sees_its_device_twin(vnodes: VNodeAgent, kube: KubeClient, namespace: str) -> None:
    kube.create(api_path("v1", "pods", namespace), {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "info"},
        "spec": {
            "restartPolicy": "Never",
            "nodeName": "vn-jetson-nano-0",
            "containers": [{"name": "info", "image": "edgetrain:dev",
                            "command": ["edgetrain", "device", "info", "--json"]}],
        },
    })
    pod = _wait_pod(kube, namespace, "info", ("Succeeded", "Failed"), timeout_s=120)
    text = container_log(pod, "info").read_text()
    assert pod["status"]["phase"] == "Succeeded", text
    info = json.loads(text)
    nano = next(n for n in vnodes.nodes if n.name == "vn-jetson-nano-0")
    assert info["sysfs_root"] == str(nano.host_root)
    assert info["simulated"] is True
    assert info["board"]["board_id"] == "jetson-nano"
    assert info["board"]["l4t"] == "32.7.1"
    # The board's table, not the current range: this session's nodes are shared, and a
    # profiling pod killed with SIGKILL (test_profiling_pod_killed_is_replaced) cannot restore
    # the range it pinned (one full run read a max of 230.4 MHz here).
    table = info["gpu"]["available_frequencies_hz"]
    assert max(table) == 921_600_000 and info["gpu"]["max_freq_hz"] in table, info["gpu"]


def test_downward_api_configmap_env_and_workdir(vnodes: VNodeAgent, kube: KubeClient,
                                                namespace: str) -> None:
    kube.create(api_path("v1", "configmaps", namespace), {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
        "data": {"profile.csv": "batch_size,gpu_freq_hz\n64,460800000\n", "mode": "fast"},
    })
    kube.create(api_path("v1", "secrets", namespace), {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
        "stringData": {"token": "s3cret"},
    })
    script = (
        "import os, pathlib\n"
        "print(open('/etc/podinfo/labels').read())\n"
        "print(open('/etc/podinfo/annotations').read())\n"
        "print(open('/config/profile.csv').read().splitlines()[1])\n"
        "print('MODE=' + os.environ['MODE'], 'NODE=' + os.environ['NODE'],\n"
        "      'FREQ=' + os.environ['FREQ'], 'CWD=' + os.path.basename(os.getcwd()))\n"
        "print('SYSFS=' + os.environ['EDGETRAIN_SYSFS_ROOT'])\n"
        "print('CSV=' + open(os.environ['PROFILE']).read().splitlines()[1])\n"
        "print('TOKEN=' + open('/creds/token').read())\n"
    )
    kube.create(api_path("v1", "pods", namespace), {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "dw", "labels": {"app": "dw"},
                     "annotations": {"edgetrain.io/gpu-frequency-hz": "460800000"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {LABEL_DEVICE_MODEL: "jetson-nano"},
            "volumes": [
                {"name": "podinfo", "downwardAPI": {"items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
                ]}},
                {"name": "config", "configMap": {"name": "cfg"}},
                {"name": "creds", "secret": {"secretName": "creds"}},
            ],
            "containers": [{
                "name": "main", "image": "edgetrain:dev", "workingDir": "/workspace",
                "command": [PY, "-c", script],
                "env": [
                    {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg",
                                                                       "key": "mode"}}},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "FREQ", "valueFrom": {"fieldRef": {
                        "fieldPath": "metadata.annotations['edgetrain.io/gpu-frequency-hz']"}}},
                    {"name": "PROFILE", "value": "/config/profile.csv"},  # a mount path
                ],
                "volumeMounts": [{"name": "podinfo", "mountPath": "/etc/podinfo"},
                                 {"name": "config", "mountPath": "/config"},
                                 {"name": "creds", "mountPath": "/creds"}],
            }],
        },
    })
    pod = _wait_pod(kube, namespace, "dw", ("Succeeded", "Failed"))
    out = container_log(pod, "main").read_text()
    assert pod["status"]["phase"] == "Succeeded", out
    assert 'app="dw"' in out
    assert 'edgetrain.io/gpu-frequency-hz="460800000"' in out
    assert "64,460800000" in out
    assert "MODE=fast NODE=vn-jetson-nano-0 FREQ=460800000 CWD=workspace" in out
    nano = next(n for n in vnodes.nodes if n.name == "vn-jetson-nano-0")
    assert f"SYSFS={nano.host_root}" in out
    assert "CSV=64,460800000" in out
    assert "TOKEN=s3cret" in out


def test_deletion_sends_sigterm_then_sigkill_after_grace(vnodes: VNodeAgent, kube: KubeClient,
                                                         namespace: str) -> None:
    script = ("import signal, sys, time\n"
              "def term(*_):\n"
              "    print('got SIGTERM', flush=True)\n"
              "    time.sleep(60)\n"  # ignores the request: the grace period must end it
              "signal.signal(signal.SIGTERM, term)\n"
              "print('up', flush=True)\n"
              "time.sleep(600)\n")
    kube.create(api_path("v1", "pods", namespace), {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "slow"},
        "spec": {"nodeName": "vn-gpu-server-0", "terminationGracePeriodSeconds": 2,
                 "containers": [{"name": "c", "image": "x", "command": [PY, "-c", script]}]},
    })
    pod = _wait_pod(kube, namespace, "slow", ("Running",))
    log = container_log(pod, "c")
    deadline = time.monotonic() + 30
    while "up" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    pid = int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("vnode://"))
    start = time.monotonic()
    kube.delete(api_path("v1", "pods", namespace, "slow"))
    gone = False
    while time.monotonic() - start < 30:
        if kube.get_or_none(api_path("v1", "pods", namespace, "slow")) is None:
            gone = True
            break
        time.sleep(0.1)
    took_s = time.monotonic() - start
    assert gone, "pod was not finalized after its grace period"
    assert 1.5 <= took_s < 15, took_s
    assert "got SIGTERM" in log.read_text()
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive


def test_restart_policy_on_failure_restarts_until_success(vnodes: VNodeAgent, kube: KubeClient,
                                                          namespace: str) -> None:
    # Fails twice (counting attempts in an emptyDir), then succeeds.
    script = ("import pathlib, sys\n"
              "p = pathlib.Path('/scratch/attempts')\n"
              "n = int(p.read_text()) + 1 if p.exists() else 1\n"
              "p.write_text(str(n)); print('attempt', n)\n"
              "sys.exit(0 if n >= 3 else 1)\n")
    kube.create(api_path("v1", "pods", namespace), {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "flaky"},
        "spec": {"restartPolicy": "OnFailure", "nodeName": "vn-gpu-server-0",
                 "volumes": [{"name": "scratch", "emptyDir": {}}],
                 "containers": [{"name": "c", "image": "x", "command": [PY, "-c", script],
                                 "volumeMounts": [{"name": "scratch",
                                                   "mountPath": "/scratch"}]}]},
    })
    pod = _wait_pod(kube, namespace, "flaky", ("Succeeded", "Failed"), timeout_s=60)
    status = pod["status"]["containerStatuses"][0]
    assert pod["status"]["phase"] == "Succeeded"
    assert status["restartCount"] == 2
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert container_log(pod, "c").read_text().strip() == "attempt 3"


def test_init_container_and_in_cluster_service_account(vnodes: VNodeAgent, kube: KubeClient,
                                                       namespace: str) -> None:
    # The main container talks to the API server the in-cluster way: projected token + CA
    # from the ServiceAccount admission plugin's volume, KUBERNETES_SERVICE_HOST/PORT.
    script = (
        "import json, os, ssl, urllib.request\n"
        "sa = '/var/run/secrets/kubernetes.io/serviceaccount'\n"
        "print(open('/shared/init.txt').read().strip())\n"
        "ctx = ssl.create_default_context(cafile=sa + '/ca.crt')\n"
        "url = 'https://%s:%s/apis/authentication.k8s.io/v1/selfsubjectreviews' % (\n"
        "    os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT'])\n"
        "body = json.dumps({'apiVersion': 'authentication.k8s.io/v1',\n"
        "                   'kind': 'SelfSubjectReview'}).encode()\n"
        "req = urllib.request.Request(url, body, {'Content-Type': 'application/json',\n"
        "    'Authorization': 'Bearer ' + open(sa + '/token').read()})\n"
        "print(json.load(urllib.request.urlopen(req, context=ctx))['status']['userInfo']"
        "['username'])\n"
        "print(open(sa + '/namespace').read())\n"
    )
    kube.create(api_path("v1", "pods", namespace), {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "incluster"},
        "spec": {
            "restartPolicy": "Never", "nodeName": "vn-gpu-server-0",
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "initContainers": [{"name": "init", "image": "x",
                                "command": ["sh", "-c", "echo prepared > /shared/init.txt"],
                                "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}],
            "containers": [{"name": "main", "image": "x", "command": [PY, "-c", script],
                            "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}],
        },
    })
    pod = _wait_pod(kube, namespace, "incluster", ("Succeeded", "Failed"))
    out = container_log(pod, "main").read_text().split()
    assert pod["status"]["phase"] == "Succeeded", out
    assert out == ["prepared", f"system:serviceaccount:{namespace}:default", namespace]
    init = pod["status"]["initContainerStatuses"][0]["state"]["terminated"]
    assert init["exitCode"] == 0


def test_a_node_without_its_registry_never_starts_a_container(
        vnodes: VNodeAgent, kube: KubeClient, namespace: str, tmp_path: Path) -> None:
    """`registry_reachable=False` (an edge node cut off from its registry): the pod stays
    Pending, its container in ErrImagePull then ImagePullBackOff naming the image, and the
    command never runs."""
    agent = VNodeAgent(kube, node_specs({}, 1, prefix=f"noreg{namespace[-5:]}"),
                       tmp_path / "vn", restart_backoff_s=0.5, registry_reachable=False)
    agent.start()
    try:
        agent.wait_ready()
        node = agent.nodes[0]
        image = "registry.example/edgetrain/trainer:1.0"
        kube.create(api_path("v1", "pods", namespace), {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nopull"},
            "spec": {"restartPolicy": "Never", "nodeName": node.name, "containers": [
                {"name": "main", "image": image,
                 "command": [PY, "-c", "open('ran', 'w').write('ran')"]}]}})
        seen: set[str] = set()

        def waiting(pod: Obj) -> bool:
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                state = (cs.get("state") or {}).get("waiting") or {}
                if state.get("reason") in ("ErrImagePull", "ImagePullBackOff"):
                    assert image in state["message"], state
                    if state["reason"] == "ErrImagePull":
                        assert "lookup registry.example: no such host" in state["message"]
                    seen.add(state["reason"])
            return seen == {"ErrImagePull", "ImagePullBackOff"}

        pod = kube.wait_for(api_path("v1", "pods", namespace, "nopull"), waiting,
                            timeout_s=60, interval_s=0.1, what="ErrImagePull, ImagePullBackOff")
        assert pod["status"]["phase"] == "Pending"
        assert not list(node.dir.glob("pods/*/root/ran"))
    finally:
        agent.stop()


def _claim_pod(name: str, node: str, script: str, claim: str) -> Obj:
    """A restricted pod (UID 65532, read-only root) with `claim` mounted at /ckpt."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never", "nodeName": node,
            "securityContext": {"runAsNonRoot": True, "runAsUser": WORKER_UID,
                                "runAsGroup": WORKER_GID,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": claim}}],
            "containers": [{
                "name": "main", "image": "edgetrain:dev", "command": [PY, "-c", script],
                "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "capabilities": {"drop": ["ALL"]},
                                    "readOnlyRootFilesystem": True}}],
        },
    }


def test_a_claim_on_an_nfs_export_is_shared_by_pods_on_every_node(
        vnodes: VNodeAgent, kube: KubeClient, namespace: str, tmp_path: Path) -> None:
    """A PVC bound to an NFS PV of this host: what a pod on one node writes there (as UID
    65532, under a read-only root) a pod on another node reads, and it lands in the export."""
    export = tmp_path / "export"
    prepare_shared_dir(export)
    with nfs_claim(kube, namespace, export) as claim:
        kube.create(api_path("v1", "pods", namespace), _claim_pod(
            "writer", "vn-jetson-nano-0",
            "import os; os.makedirs('/ckpt/run1'); open('/ckpt/run1/step', 'w').write('42')",
            claim))
        pod = _wait_pod(kube, namespace, "writer", ("Succeeded", "Failed"), timeout_s=90)
        assert pod["status"]["phase"] == "Succeeded", container_log(pod, "main").read_text()
        kube.create(api_path("v1", "pods", namespace), _claim_pod(
            "reader", "vn-jetson-orin-nano-0", "print(open('/ckpt/run1/step').read())", claim))
        pod = _wait_pod(kube, namespace, "reader", ("Succeeded", "Failed"), timeout_s=90)
        assert container_log(pod, "main").read_text().strip() == "42"
    written = export / "run1" / "step"
    assert written.read_text() == "42" and written.stat().st_uid == WORKER_UID


def test_a_claim_a_virtual_node_cannot_mount_keeps_the_pod_creating(
        vnodes: VNodeAgent, kube: KubeClient, namespace: str, tmp_path: Path) -> None:
    """An NFS server elsewhere: the pod waits in ContainerCreating naming the PV and the fix,
    and its command never runs."""
    export = tmp_path / "export"
    export.mkdir()
    with nfs_claim(kube, namespace, export, server="192.0.2.10") as claim:
        kube.create(api_path("v1", "pods", namespace), _claim_pod(
            "far", "vn-jetson-nano-0", "open('/ckpt/ran', 'w').write('ran')", claim))

        def creating(pod: Obj) -> bool:
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                state = (cs.get("state") or {}).get("waiting") or {}
                if state.get("reason") == "ContainerCreating" and state.get("message"):
                    assert "NFS server '192.0.2.10' is not this host" in state["message"]
                    return True
            return False

        pod = kube.wait_for(api_path("v1", "pods", namespace, "far"), creating, timeout_s=60,
                            what="ContainerCreating with the claim's reason")
        assert pod["status"]["phase"] == "Pending"
        assert not (export / "ran").exists()
