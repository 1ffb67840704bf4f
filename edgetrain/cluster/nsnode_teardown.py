"""Removing a namespaced node (nsnode.py) again, from its recorded state, whatever state it is
in: its kubelet first (it restarts nothing then), then every process in its namespaces or its
cgroup root (containerd, shims, the holder, the pods' processes), which takes the namespaces,
every mount made in them, the veth pair and the pod network with it; then its cgroups and its
files. `ns_leftovers` lists whatever is still there (empty when clean)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from edgetrain.cluster.hostnet import link_exists
from edgetrain.cluster.nsnode import (
    cgroup_hierarchies,
    cgroup_pids,
    ns_id,
    pids_in_namespaces,
    remove_cgroup_root,
)
from edgetrain.cluster.process import pid_alive, pid_cmdline


def _wait_gone(pids: list[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _recorded(state: dict[str, Any], name: str) -> int | None:
    """The pid of a recorded process if it still runs what was recorded (pids get reused)."""
    rec = state.get("pids", {}).get(name)
    if rec is None:
        return None
    cmd = pid_cmdline(int(rec["pid"]))
    return int(rec["pid"]) if cmd and cmd[0] == rec.get("runs", rec["argv0"]) else None


def _namespaces(state: dict[str, Any]) -> tuple[str, str]:
    """The node's namespaces while its holder still holds them, else ("", ""): a namespace
    that is gone can see its inode number given to another's."""
    holder = _recorded(state, "ns")
    if holder is None or ns_id(holder, "mnt") != state.get("mnt_ns"):
        return "", ""
    return str(state.get("mnt_ns", "")), str(state.get("net_ns", ""))


def node_processes(state: dict[str, Any]) -> list[int]:
    """Every process of the node: in its cgroup root (each process `cluster up` starts for
    it joins that first, and pods live below it), or in its namespaces."""
    pids = set(cgroup_pids(state["cgroup_root"]))
    pids.update(pids_in_namespaces(*_namespaces(state)))
    pids.discard(os.getpid())
    return sorted(p for p in pids if pid_alive(p))


def teardown_ns_node(state: dict[str, Any]) -> None:
    """Stop one namespaced node and remove all it left on this host. Idempotent."""
    kubelet = _recorded(state, "kubelet")
    if kubelet is not None:
        _signal([kubelet], signal.SIGTERM)
        _wait_gone([kubelet], 2.0)
    # Everything else at once: the pods' processes, shims, containerd, the holder. With the
    # last of them the namespaces go, and with them every mount inside and the veth pair.
    for _ in range(5):
        pids = node_processes(state)
        if not pids:
            break
        _signal(pids, signal.SIGKILL)
        _wait_gone(pids, 5.0)
    # A process recorded before its namespaces were (a holder that failed early).
    for name in state.get("pids", {}):
        pid = _recorded(state, name)
        if pid is not None:
            _signal([pid], signal.SIGKILL)
            _wait_gone([pid], 5.0)
    # A killed process stays in its cgroup until its parent (here often PID 1) reaps it, and
    # a cgroup with a member cannot be removed.
    deadline = time.monotonic() + 30.0
    while remove_cgroup_root(state["cgroup_root"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    veth = str(state.get("veth", ""))
    if veth and link_exists(veth):
        subprocess.run(["ip", "link", "del", veth], capture_output=True, check=False)
    shutil.rmtree(state["dir"], ignore_errors=True)


def ns_leftovers(state: dict[str, Any]) -> list[str]:
    """What a namespaced node left behind (empty when clean)."""
    found = [f"process {pid} ({(pid_cmdline(pid) or ['?'])[0]})"
             for pid in node_processes(state)]
    found += [f"cgroup {h / state['cgroup_root']}" for h in cgroup_hierarchies()
              if (h / state["cgroup_root"]).exists()]
    if state.get("veth") and link_exists(str(state["veth"])):
        found.append(f"interface {state['veth']}")
    if Path(state["dir"]).exists():
        found.append(f"node files under {state['dir']}")
    return found
