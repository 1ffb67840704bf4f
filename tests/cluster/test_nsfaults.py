"""Faults on one real namespaced node (edgetrain/cluster/nsfaults.py): a container killed with
SIGKILL is restarted or failed by the kubelet as its restartPolicy says; a node that loses
power goes NotReady with its containers dead and nothing of it running, and comes back Ready
from its disk, running its pod again. The node is amd64 (native, not emulated: the faults are
the runtime's, not the architecture's)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgetrain.api.keys import LABEL_EMULATED_ARCH
from edgetrain.cluster import api_path
from edgetrain.cluster.hostnet import link_exists
from edgetrain.cluster.jetsons import STATE_FILE, jetson_labels, jetson_leftovers
from edgetrain.cluster.nodes import node_specs
from edgetrain.cluster.nsfaults import (
    cut_outside,
    kill_container,
    power_off,
    power_on,
    powered,
    restart_kubelet,
    task_pid,
)
from edgetrain.cluster.nsnode import cgroup_pids
from edgetrain.cluster.nsnode_teardown import node_processes
from edgetrain.cluster.process import pid_alive
from edgetrain.kube import node_schedulable
from tests.cluster.realnodes import RealCluster, real_cluster, skip_or_fail_without_kubelets
from tests.helpers import project_image_up_to_date

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

IMAGE = "ghcr.io/edgetrain/node-agent:0.1.0"
NS = "default"


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    skip_or_fail_without_kubelets()
    project_image_up_to_date("node-agent")  # its amd64 member runs the tests' pods
    specs = node_specs({"jetson-nano": 1}, prefix="nsf")
    run_dir = tmp_path_factory.mktemp("nsf")
    with real_cluster(run_dir, specs) as rc:
        state = json.loads((run_dir / STATE_FILE).read_text())
        yield rc
    assert jetson_leftovers(run_dir, state) == []
    assert not link_exists(rc.fleet.net.dummy)


def _pod(name: str, restart: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "restartPolicy": restart, "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "Never",
                        "command": ["sleep", "3600"]}]}}


def _status(cs: dict[str, Any]) -> str:
    return next(iter(cs.get("state") or {"?": None}))


def _running(rc: RealCluster, name: str, restarts: int = 0, other_than: str = "",
             ) -> dict[str, Any]:
    """The pod's container once it runs after at least `restarts` restarts (and is not the
    container `other_than`: a status from before a power loss still names that one)."""
    def ok(p: dict[str, Any]) -> bool:
        css = p.get("status", {}).get("containerStatuses") or []
        return bool(css) and _status(css[0]) == "running" and \
            int(css[0]["restartCount"]) >= restarts and css[0]["containerID"] != other_than
    pod = rc.kube.wait_for(api_path("v1", "pods", NS, name), ok, timeout_s=180,
                           what=f"running after {restarts} restarts")
    return dict(pod["status"]["containerStatuses"][0])


def test_node_is_real_and_native(real: RealCluster) -> None:
    (node,) = real.fleet.nodes
    obj = real.kube.get(api_path("v1", "nodes", name=node.name))
    assert obj["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    labels = obj["metadata"]["labels"]
    assert labels["kubernetes.io/arch"] == "amd64" and LABEL_EMULATED_ARCH not in labels
    assert labels["edgetrain.io/node-kind"] == "jetson"
    assert jetson_labels(node.name, node_specs({"jetson-nano": 1})[0].profile, "amd64")[
        "kubernetes.io/arch"] == "amd64"


def test_container_kill_restarts_or_fails_per_restart_policy(real: RealCluster) -> None:
    (node,) = real.fleet.nodes
    for name, policy in (("always", "Always"), ("never", "Never")):
        real.kube.create(api_path("v1", "pods", NS), _pod(name, policy))
    for name in ("always", "never"):
        cs = _running(real, name)
        pid = kill_container(node, cs["containerID"])
        deadline = time.monotonic() + 10
        while pid_alive(pid):
            assert time.monotonic() < deadline, f"pid {pid} alive after SIGKILL"
            time.sleep(0.05)
    again = _running(real, "always", restarts=1)
    assert again["lastState"]["terminated"]["exitCode"] == 137, again
    failed = real.kube.wait_for(api_path("v1", "pods", NS, "never"),
                                lambda p: p.get("status", {}).get("phase") in (
                                    "Failed", "Succeeded"), timeout_s=60, what="ended")
    term = failed["status"]["containerStatuses"][0]["state"]["terminated"]
    assert failed["status"]["phase"] == "Failed" and term["exitCode"] == 137, failed["status"]
    real.kube.delete(api_path("v1", "pods", NS, "never"))


def _ready(node: dict[str, Any]) -> str:
    return next((c["status"] for c in node.get("status", {}).get("conditions") or []
                 if c["type"] == "Ready"), "")


def test_power_loss_kills_everything_and_the_node_comes_back(real: RealCluster) -> None:
    (node,) = real.fleet.nodes
    cs = _running(real, "always", restarts=1)
    container_pid = task_pid(node, cs["containerID"])
    holder = node.procs["ns"].pid
    state = node.state()
    killed = power_off(node)
    # The kubelet, containerd, the shims, the containers and the holder: at least five.
    assert killed >= 5, killed
    assert not pid_alive(container_pid) and not pid_alive(holder)
    assert node_processes(state) == [] and cgroup_pids(node.cgroup_root) == []
    assert not link_exists(node.addr.veth) and not powered(node)
    assert (node.dir / "containerd").is_dir()  # its disk stays
    path = api_path("v1", "nodes", name=node.name)
    # Silent: NotReady (Unknown) after the node controller's grace period.
    real.kube.wait_for(path, lambda n: _ready(n) == "Unknown", timeout_s=120,
                       what="NotReady after the power loss")
    pod = real.kube.get(api_path("v1", "pods", NS, "always"))
    assert pod["spec"]["nodeName"] == node.name  # still bound to it
    started = time.monotonic()
    power_on(node)
    real.kube.wait_for(path, lambda n: node_schedulable(n), timeout_s=120,
                       what="Ready again after power on")
    print(f"power on to Ready: {time.monotonic() - started:.1f} s")
    again = _running(real, "always", other_than=cs["containerID"])
    new_pid = task_pid(node, again["containerID"])
    assert pid_alive(new_pid) and new_pid in cgroup_pids(node.cgroup_root)
    assert powered(node)


def test_kubelet_restart_leaves_containers_running(real: RealCluster) -> None:
    """The kubelet alone restarts: the pod's container runs on, the Node stays Ready."""
    (node,) = real.fleet.nodes
    cs = _running(real, "always")
    pid, kubelet = task_pid(node, cs["containerID"]), node.procs["kubelet"].pid
    restart_kubelet(node)
    assert node.procs["kubelet"].pid != kubelet and not pid_alive(kubelet)
    path = api_path("v1", "nodes", name=node.name)
    beat = _heartbeat(real.kube.get(path))
    real.kube.wait_for(path, lambda n: _heartbeat(n) > beat and node_schedulable(n),
                       timeout_s=120, what="a status update from the new kubelet")
    again = _running(real, "always")
    assert again["containerID"] == cs["containerID"] and pid_alive(pid)
    assert again["restartCount"] == cs["restartCount"]


def _heartbeat(node: dict[str, Any]) -> str:
    return str(next(c["lastHeartbeatTime"] for c in node["status"]["conditions"]
                    if c["type"] == "Ready"))


def test_a_node_cut_off_cannot_pull_and_says_so(real: RealCluster) -> None:
    """With no route out, an image the node does not hold fails to pull at once (ErrImagePull
    or its back-off), and the node stays Ready."""
    (node,) = real.fleet.nodes
    cut_outside(node)
    pod = _pod("pull", "Never")
    pod["spec"]["containers"][0].update(image="ghcr.io/edgetrain/not-here:0",
                                        imagePullPolicy="IfNotPresent")
    real.kube.create(api_path("v1", "pods", NS), pod)
    started = time.monotonic()

    def waiting(p: dict[str, Any]) -> bool:
        css = p.get("status", {}).get("containerStatuses") or []
        return bool(css) and (css[0].get("state", {}).get("waiting") or {}).get("reason") in (
            "ErrImagePull", "ImagePullBackOff")
    done = real.kube.wait_for(api_path("v1", "pods", NS, "pull"), waiting, timeout_s=60,
                              what="ErrImagePull")
    print(f"ErrImagePull after {time.monotonic() - started:.1f} s: "
          f"{done['status']['containerStatuses'][0]['state']['waiting'].get('message')}")
    assert node_schedulable(real.kube.get(api_path("v1", "nodes", name=node.name)))
    # The API server still reaches the kubelet (a container's log).
    assert real.kube.get_text(api_path("v1", "pods", NS, "always", "log")) == ""
    real.kube.delete(api_path("v1", "pods", NS, "pull"))


def test_nodes_directory_is_under_the_run_dir(real: RealCluster) -> None:
    (node,) = real.fleet.nodes
    assert Path(node.dir).is_relative_to(real.cluster.run_dir)
    assert node.cgroup_root.startswith(f"edgetrain{node.addr.net.slot}-")


def test_an_image_streamed_into_one_node_runs(real: RealCluster) -> None:
    """An image streamed into one node (no archive on disk): the operator's amd64 member, then
    a pod of it."""
    (node,) = real.fleet.nodes
    project_image_up_to_date("operator")  # on a fresh host no other test may have built it yet
    real.import_images(node.name, ("operator",), "linux/amd64")
    assert not real.missing_images(), real.missing_images()
    pod = _pod("streamed", "Never")
    pod["spec"]["containers"][0].update(image="ghcr.io/edgetrain/operator:0.1.0",
                                        command=["python", "-c", "print('streamed')"])
    real.kube.create(api_path("v1", "pods", NS), pod)
    done = real.kube.wait_for(api_path("v1", "pods", NS, "streamed"),
                              lambda p: p.get("status", {}).get("phase") in (
                                  "Succeeded", "Failed"), timeout_s=120, what="ended")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert real.kube.get_text(api_path("v1", "pods", NS, "streamed", "log")).strip() == \
        "streamed"
