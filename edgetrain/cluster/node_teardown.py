"""Removing a real node (realnode.py) again: its processes, its pods' cgroups, the mounts under
the cluster's directory, its interfaces, the ip_forward sysctl, and what the kubelet and
containerd write to host paths whatever their configuration says. `leftovers` lists whatever
is still there (the tests assert it is empty after `cluster down`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgetrain.cluster import binaries
from edgetrain.cluster.hostnet import NodeNetwork, remove_links, restore_ip_forward
from edgetrain.cluster.process import pid_alive, pid_cmdline

STATE_FILE = "realnode.json"
# Host paths the kubelet and containerd write whatever their configuration says: each one
# that did not exist before `cluster up` is removed by `teardown`.
HOST_PATHS = (
    "/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/run/containerd",
    "/opt/containerd", "/var/lib/containerd", "/usr/libexec/kubernetes", "/etc/kubernetes",
    "/run/nri", "/var/run/nri",
)
# Shared with other CNI users (podman): only this node's entries go, then empty directories.
SHARED_PATHS = ("/var/lib/cni", "/etc/cni", "/var/run/netns")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def kubelet_running() -> bool:
    """True if a kubelet of ours already runs in this host's namespaces (another cluster's
    real server node; namespaced Jetson nodes do not count: they share no host path)."""
    return bool(pids_running(str(binaries.bin_dir() / "kubelet")))


def kubepods_dirs() -> list[Path]:
    """The kubelet's pod cgroups in every hierarchy (v1) or the unified one (v2)."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT / "kubepods"]
    return [d / "kubepods" for d in sorted(CGROUP_ROOT.iterdir())
            if d.is_dir() and not d.is_symlink()]


def pids_running(exe: str) -> list[int]:
    """Pids whose argv[0] is `exe`, in this host's mount namespace (a namespaced node's
    processes are its own: nsnode_teardown.py)."""
    own = _mnt_ns(os.getpid())
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            cmd = pid_cmdline(int(entry.name))
            if cmd and cmd[0] == exe and _mnt_ns(int(entry.name)) == own:
                out.append(int(entry.name))
    return out


def _mnt_ns(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return ""


def _kill(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait_gone(pids: list[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)


def _stop_pid(pid: int, argv0: str, grace_s: float) -> None:
    cmd = pid_cmdline(pid)
    if not cmd or cmd[0] != argv0:
        return  # gone, or the pid was reused
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    _wait_gone([pid], grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    _wait_gone([pid], 5.0)


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below `root`, deepest first."""
    found = []
    prefix = str(root.resolve())
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


def _cgroup_pids(dirs: list[Path]) -> list[int]:
    pids = []
    for d in dirs:
        for procs in d.rglob("cgroup.procs") if d.exists() else []:
            with contextlib.suppress(OSError, ValueError):
                pids += [int(x) for x in procs.read_text().split()]
    return pids


def _remove_cgroups(dirs: list[Path]) -> None:
    for d in dirs:
        if not d.exists():
            continue
        for sub in sorted((p for p in d.rglob("*") if p.is_dir()),
                          key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                sub.rmdir()
        with contextlib.suppress(OSError):
            d.rmdir()


def teardown(run_dir: Path, log: Callable[[str], None] = lambda _m: None) -> bool:
    """Stop the real node of the cluster in `run_dir` and remove all it left on this host;
    False if there was none. Idempotent."""
    state_path = run_dir / STATE_FILE
    try:
        state: dict[str, Any] = json.loads(state_path.read_text())
    except (OSError, ValueError):
        return False
    bin_dir = Path(state.get("bin_dir", str(binaries.bin_dir())))
    node_dir = Path(state["dir"])
    pids = state.get("pids", {})
    # 1. The kubelet first, so it restarts nothing; then every pod through the CRI (stops the
    #    containers, tears the CNI down, unmounts /dev/shm and the network namespaces).
    if "kubelet" in pids:
        _stop_pid(int(pids["kubelet"]["pid"]), pids["kubelet"]["argv0"], 2.0)
    sock = node_dir / "ctd" / "ctd.sock"
    if sock.exists() and (bin_dir / "crictl").exists():
        crictl = [str(bin_dir / "crictl"), "--runtime-endpoint", f"unix://{sock}",
                  "--timeout", "20s"]
        subprocess.run([*crictl, "rmp", "--all", "--force"], capture_output=True, timeout=90,
                       check=False)
    for name in ("api-relay", "containerd"):
        if name in pids:
            _stop_pid(int(pids[name]["pid"]), pids[name]["argv0"], 10.0)
    # 2. Whatever survived: shims and the processes in the pods' cgroups.
    shims = pids_running(str(bin_dir / "containerd-shim-runc-v2"))
    existed = [Path(p) for p in state.get("kubepods_existed", [])]
    ours = [d for d in kubepods_dirs() if d not in existed]
    leftover = _cgroup_pids(ours) + shims
    _kill(leftover)
    _wait_gone(leftover, 10.0)
    _remove_cgroups(ours)
    # 3. Mounts (the kubelet's rshared root, volumes, rootfs, netns), then the files.
    for point in mounts_under(run_dir):
        res = subprocess.run(["umount", point], capture_output=True, check=False)
        if res.returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    net = NodeNetwork(**state["net"])
    remove_links(net)
    restore_ip_forward(str(state.get("ip_forward", "")))
    existed_paths = set(state.get("host_paths_existed", []))
    for p in HOST_PATHS:
        if p not in existed_paths and os.path.lexists(p):
            shutil.rmtree(p, ignore_errors=True)
    _remove_our_traces(node_dir, net, existed_paths)
    for p in SHARED_PATHS:
        if p not in existed_paths:
            _prune_empty(Path(p))
    shutil.rmtree(node_dir, ignore_errors=True)
    state_path.unlink(missing_ok=True)
    log(f"real node {state['name']}: stopped; interfaces, mounts and host files removed")
    return True


def _remove_our_traces(node_dir: Path, net: NodeNetwork, existed: set[str]) -> None:
    """In host directories that existed before: only what this node put there."""
    if "/var/log/containers" in existed:
        for link in Path("/var/log/containers").glob("*.log"):
            with contextlib.suppress(OSError):
                if str(node_dir) in os.readlink(link):
                    link.unlink()
    for f in Path("/var/lib/cni/results").glob(f"{net.network_name}-*"):
        f.unlink(missing_ok=True)
    if "/var/lib/kubelet" in existed:
        for sock in ("device-plugins/kubelet.sock", "pod-resources/kubelet.sock"):
            Path("/var/lib/kubelet", sock).unlink(missing_ok=True)
    if "/run/containerd" in existed:
        # Shim sockets are hard-coded under /run/containerd/s; runc state is under the node.
        for f in Path("/run/containerd/s").glob("*"):
            with contextlib.suppress(OSError):
                if not _socket_in_use(f):
                    f.unlink()


def _prune_empty(root: Path) -> None:
    """Remove `root` and the directories under it that are empty (bottom up)."""
    if not root.is_dir() or root.is_symlink():
        return
    for sub in sorted((p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()),
                      key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            sub.rmdir()
    with contextlib.suppress(OSError):
        root.rmdir()


def _socket_in_use(path: Path) -> bool:
    with contextlib.suppress(OSError):
        return str(path) in Path("/proc/net/unix").read_text()
    return False


def leftovers(run_dir: Path, state: dict[str, Any]) -> list[str]:
    """What a real node left behind after teardown (empty when clean), for tests and status."""
    found = []
    bin_dir = Path(state.get("bin_dir", str(binaries.bin_dir())))
    for b in ("kubelet", "containerd", "containerd-shim-runc-v2"):
        found += [f"process {pid} ({b})" for pid in pids_running(str(bin_dir / b))]
    found += [f"mount {m}" for m in mounts_under(run_dir)]
    net = NodeNetwork(**state["net"])
    found += [f"interface {n}" for n in (net.dummy, net.bridge)
              if Path("/sys/class/net", n).exists()]
    existed = set(state.get("host_paths_existed", []))
    found += [f"path {p}" for p in HOST_PATHS if p not in existed and os.path.lexists(p)]
    found += [f"path {f}" for f in Path("/var/lib/cni/results").glob(f"{net.network_name}-*")]
    ours = [d for d in kubepods_dirs() if str(d) not in state.get("kubepods_existed", [])]
    found += [f"cgroup {d}" for d in ours if d.exists()]
    if (run_dir / STATE_FILE).exists() or Path(state["dir"]).exists():
        found.append(f"node files under {state['dir']}")
    return found
