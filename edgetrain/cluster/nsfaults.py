"""Faults of a real namespaced node (nsnode.py), as the fault suite injects them
(docs/cluster.md, "Faults on real nodes").

- `power_off`: the board loses power. Every process of the node dies at once by SIGKILL:
  the kubelet, containerd, the shims, every container of its pods, the namespace holder. No
  container is stopped gracefully and no CRI call is made (nothing runs on a board without
  power to make one). With the holder the node's mount and network namespaces go, and with
  them its `/run`, its pods' network namespaces and its veth: the node is unreachable. What a
  board keeps across a power loss stays: its disk (the node's directory: `/var/lib/kubelet`,
  `/var/lib/containerd` with its images, `/var/log`, `/var/lib/edgetrain`), its certificates
  and its name. The API server hears nothing more, so the Node goes NotReady after the node
  controller's grace period; its pods stay bound to it until the control plane acts.
- `power_on`: the board boots again from that disk (`NsNode.boot`, then the kubelet), with an
  empty `/run` and no pod network left; the kubelet finds its pods' containers exited and
  starts again whatever is still bound to it.
- `kill_container`: SIGKILL of one container's process, as a crash or the OOM killer ends it:
  containerd reports the exit, and the kubelet restarts the container or fails the pod as its
  restartPolicy says.
- `restart_kubelet`: the kubelet alone stops and starts (its containers run on): it forgets the
  ServiceAccount tokens it cached and requests new ones for its pods' projected volumes at
  once, which is how a test makes a real kubelet rotate them now.
- `cut_outside`: the node loses its route to anything but the local clusters and this host (a
  registry, DNS): an image it does not hold cannot be pulled, and says so at once.

The device twin is the board's hardware model and runs outside the node (`twinhost`): a power
loss does not reset it."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time

from edgetrain.cluster.hostnet import link_exists
from edgetrain.cluster.nsnode import NsNode, make_cgroup_root, remove_cgroup_root
from edgetrain.cluster.nsnode_teardown import node_processes
from edgetrain.cluster.process import pid_alive

CRI_NAMESPACE = "k8s.io"  # containerd's namespace for the CRI's containers


def power_off(node: NsNode, timeout_s: float = 30.0) -> int:
    """Kill every process of the node at once (SIGKILL); keep its files. Returns how many
    processes died."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout_s
    # A sweep may race with a process that forks (a shim starting a container): sweep until
    # none is left.
    while pids := node_processes(node.state()):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        if time.monotonic() > deadline:
            raise RuntimeError(f"node {node.name}: processes {pids} still alive after "
                               f"{timeout_s:.0f} s of SIGKILL")
    for proc in node.procs.values():  # this interpreter's children: reap them
        proc.returncode()
    node.procs.clear()
    node.runs.clear()
    node.mnt_ns = node.net_ns = ""
    node._save()
    # A board boots with no cgroups of its pods; a killed process leaves its cgroup once its
    # parent reaped it.
    while remove_cgroup_root(node.cgroup_root) and time.monotonic() < deadline:
        time.sleep(0.2)
    # The veth went with the network namespace; wait for the kernel to have removed it.
    while link_exists(node.addr.veth) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(killed)


def powered(node: NsNode) -> bool:
    """True while the node's processes run (its holder, containerd, kubelet)."""
    return bool(node.procs) and all(p.alive() for p in node.procs.values())


def power_on(node: NsNode, timeout_s: float = 120.0) -> None:
    """Boot the node again after `power_off`: namespaces, network, containerd, kubelet."""
    if node.procs:
        raise RuntimeError(f"node {node.name} is powered on (power_off first)")
    if link_exists(node.addr.veth):
        raise RuntimeError(f"node {node.name}: interface {node.addr.veth} is still there")
    # host-local's leases: no pod network survived the power loss, so no address is in use
    # (the kubelet tears down no sandbox whose network namespace is gone).
    shutil.rmtree(node.dir / "cni-state" / "networks", ignore_errors=True)
    make_cgroup_root(node.cgroup_root)
    node.boot(timeout_s)
    node.start_kubelet()


def restart_kubelet(node: NsNode, timeout_s: float = 30.0) -> None:
    """Stop the node's kubelet (SIGTERM) and start it again; its pods' containers run on."""
    node.procs["kubelet"].stop(grace_s=timeout_s)
    del node.procs["kubelet"], node.runs["kubelet"]
    node.start_kubelet()


LOCAL_NETWORKS = "198.18.0.0/15"  # every slot's nodes, pods and Services (hostnet.py)


def _host_addresses() -> list[str]:
    """This host's own IPv4 addresses outside loopback and the local clusters' range: the API
    server's connections to a kubelet come from one of them (the host's veth end has none)."""
    out = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True,
                         check=False).stdout or "[]"
    local = ipaddress.ip_network(LOCAL_NETWORKS)
    return sorted({a["local"] for link in json.loads(out) for a in link.get("addr_info", [])
                   if not ipaddress.ip_address(a["local"]).is_loopback
                   and ipaddress.ip_address(a["local"]) not in local})


def cut_outside(node: NsNode) -> None:
    """Replace the node's default route with routes to the local clusters' networks and to
    this host's own addresses (the API server reaches the kubelet from one: logs, exec)."""
    inside = [*node.nsenter(), "ip", "route"]
    via = ["via", node.addr.gateway]
    for args in (["del", "default"], ["add", LOCAL_NETWORKS, *via],
                 *(["add", f"{a}/32", *via] for a in _host_addresses())):
        res = subprocess.run([*inside, *args], capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"node {node.name}: ip route {' '.join(args)}: "
                               f"{res.stderr.strip()}")


def task_pid(node: NsNode, container_id: str) -> int:
    """The host pid of a running container's process (`containerd://<id>` or `<id>`)."""
    cid = container_id.removeprefix("containerd://")
    res = subprocess.run([*node.ctr(), "-n", CRI_NAMESPACE, "tasks", "ls"],
                         capture_output=True, text=True, timeout=30, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"node {node.name}: ctr tasks ls: {res.stderr.strip()[-300:]}")
    for line in res.stdout.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[0] == cid:
            if fields[2] != "RUNNING":
                raise RuntimeError(f"node {node.name}: container {cid[:12]} is {fields[2]}")
            return int(fields[1])
    raise RuntimeError(f"node {node.name}: no task for container {cid[:12]}")


def kill_container(node: NsNode, container_id: str) -> int:
    """SIGKILL a container's process (the node has no pid namespace of its own: containerd's
    pids are the host's); returns the pid."""
    pid = task_pid(node, container_id)
    os.kill(pid, signal.SIGKILL)
    return pid
