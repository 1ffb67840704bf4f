"""A real node in namespaces of its own (docs/cluster.md, "Real Jetson nodes"): a kubelet and
containerd started inside a mount and a network namespace that a holder process keeps, with a
cgroup root of their own in every hierarchy. Several run beside each other and beside the
host's server node (`realnode.py`): each has its own `/var/lib/kubelet`, `/var/log`, `/run`
(`nodefs.py`), its own address and port 10250, its own pod bridge. The holder is
`unshare --mount --net` running `nodefs.py`, which then execs `sleep infinity`; everything
else enters with `nsenter`. `nsnode_teardown.py` removes a node again."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetrain.cluster import binaries, nodefs, twinruntime
from edgetrain.cluster.hostnet import NodeNetwork
from edgetrain.cluster.images import PAUSE_IMAGE, ctr_import, write_pause_archive
from edgetrain.cluster.nodeconfig import (
    cni_conflist,
    containerd_toml,
    kubelet_config,
    write_kubelet_identity,
)
from edgetrain.cluster.pki import Pki, write_atomic
from edgetrain.cluster.process import ComponentError, ManagedProcess, pid_cmdline, rss_bytes

# The node's own paths, as its processes see them; each is a directory of the node's
# (NsNode.dir) bound there in the node's mount namespace ("/run" is a tmpfs).
SOCKET = "/run/containerd/containerd.sock"
PRIVATE_DIRS = {
    "/var/lib/kubelet": "kubelet",
    "/var/lib/containerd": "containerd",
    "/var/lib/cni": "cni-state",
    "/var/log": "log",
    "/var/lib/edgetrain": "edgetrain",  # the chart's hostPath state directory
}
CGROUP_FS = Path("/sys/fs/cgroup")
# Jetson nodes of one cluster: node i has 198.18.<slot>.(2+i) and the pod subnet
# 198.18.<slot>.(16(i+1))/28; the server node keeps .1 and .128/25 (hostnet.py).
MAX_NS_NODES = 7
# Twin paths left out of the node's sysfs: the kubelet's cAdvisor reads the host's CPUs there
# (a twin CPU without `topology/` stops it); hostPath mounts of it are the host's, read-only.
TWIN_SKIP = ("/sys/devices/system/cpu",)


@dataclass(frozen=True)
class NsAddress:
    """Addresses and the host-side interface of the i-th namespaced node of a cluster."""

    net: NodeNetwork
    index: int

    @property
    def node_ip(self) -> str:
        """The Node's InternalIP, on eth0 in its namespace."""
        return f"198.18.{self.net.slot}.{2 + self.index}"

    @property
    def gateway(self) -> str:
        """The host's address the node routes through (the server node's, on etnode<slot>)."""
        return self.net.node_ip

    @property
    def pod_subnet(self) -> str:
        """Its pods' addresses (host-local IPAM); the host routes them through the node."""
        return f"198.18.{self.net.slot}.{16 * (self.index + 1)}/28"

    @property
    def pod_gateway(self) -> str:
        """The node's pod bridge's address."""
        return f"198.18.{self.net.slot}.{16 * (self.index + 1) + 1}"

    @property
    def veth(self) -> str:
        """The host's end of the node's veth pair (IFNAMSIZ: at most 15 characters)."""
        return f"etv{self.net.slot}n{self.index}"

    def to_json(self) -> dict[str, int]:
        return {"slot": self.net.slot, "index": self.index}


def cgroup_hierarchies() -> list[Path]:
    """The mounted hierarchies (v1, hybrid's `unified` included) or the unified one (v2)."""
    if (CGROUP_FS / "cgroup.controllers").exists():
        return [CGROUP_FS]
    return [d for d in sorted(CGROUP_FS.iterdir()) if d.is_dir() and not d.is_symlink()]


def make_cgroup_root(name: str) -> None:
    """`/<name>` in every hierarchy; cpuset copies its parent's CPUs and memory nodes, else it
    refuses tasks (kind's entrypoint does the same)."""
    for h in cgroup_hierarchies():
        d = h / name
        d.mkdir(exist_ok=True)
        for f in ("cpuset.cpus", "cpuset.mems"):
            if (h / f).exists() and not (d / f).read_text().strip():
                (d / f).write_text((h / f).read_text())


def cgroup_pids(name: str) -> list[int]:
    """Every process in `/<name>` and below, in any hierarchy."""
    pids: set[int] = set()
    for h in cgroup_hierarchies():
        # os.walk, not rglob: the kubelet removes pods' cgroups while this walks them.
        for here, _dirs, _files in os.walk(h / name):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(x) for x in Path(here, "cgroup.procs").read_text().split())
    return sorted(pids)


def remove_cgroup_root(name: str) -> list[str]:
    """Remove `/<name>` from every hierarchy, deepest first; what could not be removed."""
    left = []
    for h in cgroup_hierarchies():
        d = h / name
        if not d.exists():
            continue
        # Deepest first (os.walk bottom-up, which skips what vanishes meanwhile).
        for here, _dirs, _files in os.walk(d, topdown=False):
            if Path(here) != d:
                with contextlib.suppress(OSError):
                    os.rmdir(here)
        try:
            d.rmdir()
        except OSError:
            left.append(str(d))
    return left


def ns_id(pid: int, kind: str) -> str:
    """A process's namespace, as `mnt:[4026532…]` ("" if it is gone)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return ""


def pids_in_namespaces(mnt: str, net: str) -> list[int]:
    """Processes in the mount namespace `mnt` or the network namespace `net`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            if (mnt and ns_id(pid, "mnt") == mnt) or (net and ns_id(pid, "net") == net):
                found.append(pid)
    return found


def _run(argv: list[str], what: str, timeout_s: float = 60) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{what}: {' '.join(argv)}: {res.stderr.strip()[-400:]}")
    return res.stdout


@dataclass
class NsNode:
    """One kubelet + containerd node in its own namespaces, in `<run_dir>/nodes/<name>`."""

    run_dir: Path
    name: str
    addr: NsAddress
    labels: dict[str, str] = field(default_factory=dict)
    twin_root: Path | None = None
    # QEMU's CPU model for the containers of an emulated Jetson (boards.qemu_cpu); "" natively.
    qemu_cpu: str = ""
    # Host directories the node sees at the same path, read-write (the local cluster's shared
    # checkpoint directory, which a hostPath PersistentVolume names).
    shared_dirs: tuple[str, ...] = ()
    # The API server's address where it is not this node's slot's `kubernetes` Service (nodes
    # added to a cluster on a slot of their own: the server's certificate names the cluster's).
    api_ip: str = ""
    procs: dict[str, ManagedProcess] = field(default_factory=dict)
    runs: dict[str, str] = field(default_factory=dict)
    mnt_ns: str = ""
    net_ns: str = ""
    _save: Callable[[], None] = field(default=lambda: None, repr=False)

    @property
    def dir(self) -> Path:
        """The node's files: configs, its private directories, its certificates."""
        return self.run_dir / "nodes" / self.name

    @property
    def containerd_root(self) -> Path:
        """The host directory that is the node's /var/lib/containerd."""
        return self.dir / PRIVATE_DIRS["/var/lib/containerd"]

    @property
    def address(self) -> str:
        """The Node's InternalIP."""
        return self.addr.node_ip

    @property
    def cgroup_root(self) -> str:
        """The kubelet's cgroupRoot: unique on the host (slot and node name)."""
        return f"edgetrain{self.addr.net.slot}-{self.name}"

    @property
    def api_url(self) -> str:
        """The API server as the node reaches it: the `kubernetes` Service address, relayed."""
        return f"https://{self.api_ip or self.addr.net.api_service_ip}:443"

    def log_path(self, name: str) -> Path:
        """Log of one of the node's processes."""
        return self.run_dir / "logs" / f"{self.name}.{name}.log"

    def nsenter(self) -> list[str]:
        """Prefix that runs a command in the node's mount and network namespaces."""
        return ["nsenter", f"--target={self.procs['ns'].pid}", "--mount", "--net", "--"]

    def ctr(self) -> list[str]:
        """`ctr` against the node's containerd, from inside its namespaces."""
        return [*self.nsenter(), str(binaries.bin_dir() / "ctr"), "--address", SOCKET]

    # --- lifecycle ---

    def prepare(self, pki: Pki, timeout_s: float = 120.0,
                save: Callable[[], None] = lambda: None) -> None:
        """Files, cgroups, namespaces, network, containerd and the pause image: all but the
        kubelet (images go in before it registers). `save()` is called whenever there is more
        to tear down."""
        self._save = save
        self._write_configs(pki)
        self.boot(timeout_s)
        write_pause_archive(binaries.bin_dir() / "pause", self.dir / "pause.oci.tar")
        ctr_import(self.ctr(), self.dir / "pause.oci.tar", PAUSE_IMAGE)

    def boot(self, timeout_s: float = 120.0) -> None:
        """What starts when the board powers on, from its files: cgroup root, namespaces,
        network, containerd (its images kept under /var/lib/containerd); then the kubelet
        (`start_kubelet`). `prepare` runs it, and `nsfaults.power_on` after a power loss."""
        make_cgroup_root(self.cgroup_root)
        self._save()
        self._start_namespaces(timeout_s)
        self._connect()
        self._start_containerd(timeout_s)

    def _spawn(self, name: str, argv: list[str], runs: str,
               env: dict[str, str] | None = None) -> ManagedProcess:
        """Start a process of the node; `runs`: its argv[0] once it has exec'd (nsenter and
        unshare exec what they run)."""
        # Into the node's cgroup root before anything else: its members are the node's
        # processes, whatever namespaces they are in (nsnode_teardown.py relies on that).
        procs = " ".join(f"{h / self.cgroup_root / 'cgroup.procs'}" for h in cgroup_hierarchies())
        join = ["sh", "-c", f'for f in {procs}; do echo $$ > "$f" || exit 1; done; exec "$@"',
                "sh"]
        proc = ManagedProcess(f"{self.name}.{name}", [*join, *argv], self.log_path(name),
                              env=env, detached=True).start()
        self.procs[name] = proc
        self.runs[name] = runs
        self._save()
        return proc

    def state(self) -> dict[str, Any]:
        """What `nsnode_teardown` needs to remove the node, whatever state it is in."""
        return {
            "name": self.name, "dir": str(self.dir), "addr": self.addr.to_json(),
            "veth": self.addr.veth, "cgroup_root": self.cgroup_root,
            "mnt_ns": self.mnt_ns, "net_ns": self.net_ns,
            "pids": {n: {"pid": p.pid, "argv0": p.argv[0], "runs": self.runs[n]}
                     for n, p in self.procs.items()},
        }

    # --- configuration ---

    def _write_configs(self, pki: Pki) -> None:
        d = self.dir
        for sub in (*PRIVATE_DIRS.values(), "cni/net.d", "pki", "bin", "tmp"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        write_kubelet_identity(d, self.name, self.address, self.api_url, pki)
        runc = shutil.which("runc") or "runc"
        if self.twin_root is not None:
            runc = str(twinruntime.write_wrapper(d / "bin" / "runc", runc, self.twin_root,
                                                 qemu_cpu=self.qemu_cpu))
        write_atomic(d / "containerd.toml", containerd_toml(
            root=Path("/var/lib/containerd"), state=Path("/run/containerd"),
            socket=Path(SOCKET), opt=Path("/var/lib/containerd/opt"), runc=runc,
            runc_root=Path("/run/containerd/runc"), cni_conf_dir=d / "cni" / "net.d",
            nvidia=self.twin_root is not None,
        ).encode(), 0o644)
        write_atomic(d / "cni" / "net.d" / "10-edgetrain.conflist", json.dumps(cni_conflist(
            name=f"edgetrain-{self.addr.net.slot}-{self.addr.index}", bridge="cni0",
            subnet=self.addr.pod_subnet, gateway=self.addr.pod_gateway,
            ipam_dir=Path("/var/lib/cni/networks")), indent=2).encode(), 0o644)
        write_atomic(d / "kubelet.yaml", json.dumps(kubelet_config(
            address=self.address, tls_dir=d / "pki", client_ca=pki.ca_crt,
            endpoint=f"unix://{SOCKET}", pod_logs_dir=Path("/var/log/pods"),
            volume_plugin_dir=Path("/var/lib/kubelet/volume-plugins"),
            cgroup_root=f"/{self.cgroup_root}"), indent=2).encode(), 0o644)
        for shared in self.shared_dirs:
            # A mount point inside the node's own directory where one holds the path.
            for target, sub in PRIVATE_DIRS.items():
                if shared.startswith(target + "/"):
                    (d / sub / shared.removeprefix(target + "/")).mkdir(parents=True,
                                                                         exist_ok=True)
        spec = {
            "binds": {t: str(d / s) for t, s in PRIVATE_DIRS.items()},
            "shared": list(self.shared_dirs),
            "writable": [str(d)],
            "twin_root": str(self.twin_root) if self.twin_root is not None else "",
            "twin_skip": list(TWIN_SKIP),
        }
        write_atomic(d / "nodefs.json", json.dumps(spec, indent=2).encode(), 0o644)

    # --- processes ---

    def _start_namespaces(self, timeout_s: float) -> None:
        ready = self.dir / "ns.ready"
        ready.unlink(missing_ok=True)
        proc = self._spawn("ns", [
            "unshare", "--mount", "--net", "--propagation", "private", "--",
            _system_python(), "-I", "-S", str(Path(nodefs.__file__)),
            str(self.dir / "nodefs.json"), str(ready), "--", "sleep", "infinity"], "sleep")
        proc.wait_ready(ready.exists, timeout_s, "its namespaces set up")
        self.mnt_ns, self.net_ns = ns_id(proc.pid, "mnt"), ns_id(proc.pid, "net")
        self._save()

    def _connect(self) -> None:
        """A veth pair: eth0 in the node with its address, a route to it and its pods on the
        host. The pair dies with the node's network namespace."""
        a, pid = self.addr, self.procs["ns"].pid
        _run(["ip", "link", "add", a.veth, "type", "veth", "peer", "name", "eth0", "netns",
              str(pid)], "veth")
        _run(["ip", "link", "set", a.veth, "up"], "veth up")
        _run(["ip", "route", "add", f"{a.node_ip}/32", "dev", a.veth], "route to the node")
        _run(["ip", "route", "add", a.pod_subnet, "via", a.node_ip, "dev", a.veth],
             "route to the node's pods")
        inside = ["nsenter", f"--target={pid}", "--net", "--", "ip"]
        for args in (["link", "set", "lo", "up"], ["addr", "add", f"{a.node_ip}/32", "dev",
                     "eth0"], ["link", "set", "eth0", "up"],
                     ["route", "add", f"{a.gateway}/32", "dev", "eth0"],
                     ["route", "add", "default", "via", a.gateway, "dev", "eth0"]):
            _run([*inside, *args], "node network")

    def _node_env(self) -> dict[str, str]:
        env = dict(os.environ)
        # Its own shim first: containerd finds containerd-shim-runc-v2 on PATH.
        env["PATH"] = f"{binaries.bin_dir()}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        # The host's /tmp is read-only in the node (nodefs.py); runc writes `exec` specs there.
        env["TMPDIR"] = str(self.dir / "tmp")
        return env

    def _start_containerd(self, timeout_s: float) -> None:
        proc = self._spawn("containerd", [
            *self.nsenter(), str(binaries.bin_dir() / "containerd"),
            f"--config={self.dir / 'containerd.toml'}", "--log-level=warn"],
            str(binaries.bin_dir() / "containerd"), self._node_env())
        version = [*self.ctr(), "version"]
        proc.wait_ready(lambda: subprocess.run(version, capture_output=True, timeout=5,
                                               check=False).returncode == 0,
                        timeout_s, "serving its socket")

    def start_kubelet(self) -> None:
        """The kubelet, in the node's namespaces; it registers the Node itself."""
        d = self.dir
        labels = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        self._spawn("kubelet", [
            *self.nsenter(), str(binaries.bin_dir() / "kubelet"),
            f"--config={d / 'kubelet.yaml'}",
            f"--kubeconfig={d / 'kubelet.kubeconfig'}",
            f"--cert-dir={d / 'pki'}",
            f"--node-ip={self.address}",
            f"--hostname-override={self.name}",
            *([f"--node-labels={labels}"] if labels else []),
            "--v=1",
        ], str(binaries.bin_dir() / "kubelet"), self._node_env())

    def check(self) -> None:
        """Raise ComponentError if one of the node's processes has exited."""
        for proc in self.procs.values():
            proc.check()

    def memory_rss_bytes(self) -> dict[str, int]:
        """Resident memory of the node's own processes (holder, containerd, kubelet) and of
        its pods' shims."""
        out = {n: rss_bytes(p.pid) for n, p in self.procs.items()}
        shim = str(binaries.bin_dir() / "containerd-shim-runc-v2")
        out["shims"] = sum(rss_bytes(p) for p in cgroup_pids(self.cgroup_root)
                           if (pid_cmdline(p) or [""])[0] == shim)
        return out


def _system_python() -> str:
    """An interpreter for the standard-library scripts run as root in the node's namespaces."""
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def wait_for(probe: Any, timeout_s: float, what: str, node: NsNode) -> None:
    """Poll `probe` until true; fail with the node's process that died, or the timeout."""
    deadline = time.monotonic() + timeout_s
    while not probe():
        node.check()
        if time.monotonic() > deadline:
            raise ComponentError(node.name, f"not {what} after {timeout_s:.0f} s",
                                 node.log_path("kubelet"))
        time.sleep(0.2)
