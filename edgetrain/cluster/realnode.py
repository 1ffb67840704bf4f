"""A real server node: a kubelet built from the control plane's own module graph, containerd
2.x, runc and the CNI bridge plugin, with everything under the cluster's directory
(docs/cluster.md, "A real server node"). `teardown` (node_teardown.py) removes it again, with
what the kubelet and containerd leave outside that directory."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetrain.api.keys import LABEL_DEVICE_MODEL, LABEL_NODE_KIND
from edgetrain.cluster import binaries, relay
from edgetrain.cluster.hostnet import (
    NodeNetwork,
    create_dummy,
    read_ip_forward,
)
from edgetrain.cluster.images import PAUSE_IMAGE, ctr_import, write_pause_archive
from edgetrain.cluster.node_teardown import (
    HOST_PATHS,
    SHARED_PATHS,
    STATE_FILE,
    kubelet_running,
    kubepods_dirs,
    leftovers,
    pids_running,
    teardown,
)
from edgetrain.cluster.nodeconfig import (
    cni_conflist,
    containerd_toml,
    kubelet_config,
    write_kubelet_identity,
)
from edgetrain.cluster.pki import Pki, write_atomic
from edgetrain.cluster.process import (
    ComponentError,
    ManagedProcess,
    rss_bytes,
)
from edgetrain.kube import KubeClient, api_path, node_schedulable

NODE_BINARIES = ("kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "crictl", "pause")
UNIX_PATH_MAX = 104  # containerd's limit (sun_path is 108 bytes with the NUL on Linux)


def missing_binaries() -> list[str]:
    """Node binaries `make cluster-bins` has not built yet."""
    return [b for b in NODE_BINARIES if not os.access(binaries.bin_dir() / b, os.X_OK)]


@dataclass
class RealNode:
    """One kubelet + containerd node of the cluster in `run_dir`."""

    run_dir: Path
    name: str
    net: NodeNetwork
    api_port: int
    labels: dict[str, str] = field(default_factory=dict)
    procs: dict[str, ManagedProcess] = field(default_factory=dict)

    # --- paths and identity ---

    @property
    def dir(self) -> Path:
        """Everything of the node: configs, containerd's root and state, the kubelet's root."""
        return self.run_dir / "node"

    @property
    def address(self) -> str:
        """The Node's InternalIP, on the cluster's dummy interface."""
        return self.net.node_ip

    @property
    def socket(self) -> Path:
        """containerd's CRI socket."""
        return self.dir / "ctd" / "ctd.sock"

    @property
    def runtime(self) -> str:
        """containerd://<version>, as the kubelet reports it."""
        out = subprocess.run([str(binaries.bin_dir() / "containerd"), "--version"],
                             capture_output=True, text=True, check=False).stdout.split()
        return f"containerd://{out[2] if len(out) > 2 else 'unknown'}"

    def ctr(self) -> list[str]:
        """`ctr` against the node's containerd."""
        return [str(binaries.bin_dir() / "ctr"), "--address", str(self.socket)]

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's --root-dir (pods' volumes, its own sockets)."""
        return self.dir / "k"

    def check_path_lengths(self) -> None:
        """Unix sockets take at most 107 bytes of path: refuse a directory too deep, saying so
        (the kubelet's own sockets live under its root; containerd's next to its config)."""
        longest = max(len(str(self.socket) + ".ttrpc"),
                      len(str(self.kubelet_root / "pod-resources" / "kubelet.sock")))
        if longest > UNIX_PATH_MAX:
            raise RuntimeError(
                f"the cluster directory {self.run_dir} is too long for the node's unix sockets "
                f"({longest} > {UNIX_PATH_MAX} bytes): use a shorter --dir")

    def log_path(self, name: str) -> Path:
        """Log of one of the node's processes."""
        return self.run_dir / "logs" / f"{name}.log"

    # --- lifecycle ---

    def start(self, timeout_s: float = 120.0) -> None:
        """Interfaces, configs, containerd, the pause image, the API relay, the kubelet; wait
        until the Node is Ready. Whatever fails leaves state for `teardown`."""
        self.check_path_lengths()
        self._save_state()
        create_dummy(self.net)
        pki = Pki(self.run_dir / "pki")
        self._write_configs(pki)
        self._start_containerd(timeout_s)
        write_pause_archive(binaries.bin_dir() / "pause", self.dir / "pause.oci.tar")
        ctr_import(self.ctr(), self.dir / "pause.oci.tar", PAUSE_IMAGE)
        # The module as a script: it needs the standard library only, not the package.
        self._spawn("api-relay", [
            _python(), "-I", str(Path(relay.__file__)),
            self.net.api_service_ip, "443", "127.0.0.1", str(self.api_port)])
        self._start_kubelet(pki, timeout_s)

    def stop(self) -> None:
        """Everything `start` did, undone (see `teardown`)."""
        teardown(self.run_dir)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None,
               ) -> ManagedProcess:
        proc = ManagedProcess(name, argv, self.log_path(name), env=env, detached=True).start()
        self.procs[name] = proc
        self._save_state()
        return proc

    def _save_state(self) -> None:
        path = self.run_dir / STATE_FILE
        old: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            old = json.loads(path.read_text())
        # What existed before the first start is what must survive teardown.
        existed = old.get("host_paths_existed") or [
            p for p in (*HOST_PATHS, *SHARED_PATHS) if os.path.lexists(p)]
        kubepods = old.get("kubepods_existed")
        if kubepods is None:
            kubepods = [str(d) for d in kubepods_dirs() if d.exists()]
        state = {
            "name": self.name, "net": self.net.to_json(), "dir": str(self.dir),
            "host_paths_existed": existed, "kubepods_existed": kubepods,
            "ip_forward": old.get("ip_forward", read_ip_forward()),
            "pids": {n: {"pid": p.pid, "argv0": p.argv[0]} for n, p in self.procs.items()},
            "bin_dir": str(binaries.bin_dir()),
        }
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(state, indent=2).encode(), mode=0o644)

    # --- configuration ---

    def _write_configs(self, pki: Pki) -> None:
        d = self.dir
        for sub in ("ctd", "cni/net.d", "cni/ipam", "kubelet", "pki", "pod-logs",
                    "volume-plugins"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        write_kubelet_identity(d, self.name, self.address, f"https://127.0.0.1:{self.api_port}",
                               pki)
        write_atomic(d / "ctd" / "config.toml", self._containerd_toml().encode(), 0o644)
        write_atomic(d / "cni" / "net.d" / "10-edgetrain.conflist",
                     json.dumps(self._cni_conf(), indent=2).encode(), 0o644)
        write_atomic(d / "kubelet" / "config.yaml",
                     json.dumps(self._kubelet_config(pki), indent=2).encode(), 0o644)

    @property
    def containerd_root(self) -> Path:
        """containerd's root directory (its images, snapshots and metadata)."""
        return self.dir / "ctd" / "root"

    def _containerd_toml(self) -> str:
        c = self.dir / "ctd"
        return containerd_toml(root=self.containerd_root, state=c / "state", socket=self.socket,
                               opt=c / "opt", runc=shutil.which("runc") or "runc",
                               runc_root=c / "runc", cni_conf_dir=self.dir / "cni" / "net.d")

    def _cni_conf(self) -> dict[str, Any]:
        net = self.net
        return cni_conflist(name=net.network_name, bridge=net.bridge, subnet=net.pod_subnet,
                            gateway=net.pod_gateway, ipam_dir=self.dir / "cni" / "ipam")

    def _kubelet_config(self, pki: Pki) -> dict[str, Any]:
        return kubelet_config(address=self.address, tls_dir=self.dir / "pki",
                              client_ca=pki.ca_crt, endpoint=f"unix://{self.socket}",
                              pod_logs_dir=self.dir / "pod-logs",
                              volume_plugin_dir=self.dir / "volume-plugins")

    # --- processes ---

    def _start_containerd(self, timeout_s: float) -> None:
        env = dict(os.environ)
        # Its own shim first: containerd finds containerd-shim-runc-v2 on PATH.
        env["PATH"] = f"{binaries.bin_dir()}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        proc = self._spawn("containerd", [
            str(binaries.bin_dir() / "containerd"),
            f"--config={self.dir / 'ctd' / 'config.toml'}", "--log-level=warn"], env)
        ctr = [str(binaries.bin_dir() / "ctr"), "--address", str(self.socket), "version"]
        proc.wait_ready(lambda: subprocess.run(ctr, capture_output=True, timeout=5,
                                               check=False).returncode == 0,
                        timeout_s, "serving its socket")

    def _start_kubelet(self, pki: Pki, timeout_s: float) -> None:
        d = self.dir
        labels = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        env = dict(os.environ)
        env["PATH"] = f"{binaries.bin_dir()}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        proc = self._spawn("kubelet", [
            str(binaries.bin_dir() / "kubelet"),
            f"--config={d / 'kubelet' / 'config.yaml'}",
            f"--kubeconfig={d / 'kubelet.kubeconfig'}",
            f"--root-dir={self.kubelet_root}",
            f"--cert-dir={d / 'pki'}",
            f"--node-ip={self.address}",
            f"--hostname-override={self.name}",
            *([f"--node-labels={labels}"] if labels else []),
            "--v=1",
        ], env)
        path = api_path("v1", "nodes", name=self.name)
        with KubeClient.from_kubeconfig(self.run_dir / "kubeconfig") as client:
            # Ready alone is not enough: until the node lifecycle controller lifts its not-ready
            # taint, the scheduler puts a pod that only prefers this node on a virtual one.
            def ready() -> bool:
                node = client.get_or_none(path)
                return node is not None and node_schedulable(node)
            proc.wait_ready(ready, timeout_s, "a Ready, untainted Node")

    def memory_rss_bytes(self) -> dict[str, int]:
        """Resident memory of the node's own processes and its pods' shims."""
        out = {n: rss_bytes(p.pid) for n, p in self.procs.items()}
        out["shims"] = sum(rss_bytes(pid) for pid in pids_running(
            str(binaries.bin_dir() / "containerd-shim-runc-v2")))
        return out


def server_labels(name: str, board: str = "gpu-server", bare: bool = False,
                  ) -> dict[str, str]:
    """What the kubelet registers itself with: edgetrain's labels of a server node (no
    `virtual`: this one is not); none when bare (the kubelet's own only)."""
    if bare:
        return {}
    return {LABEL_NODE_KIND: "server", LABEL_DEVICE_MODEL: board,
            "node.kubernetes.io/instance-type": board}


def _python() -> str:
    import sys

    return sys.executable


__all__ = ["STATE_FILE", "ComponentError", "RealNode", "kubelet_running", "leftovers",
           "missing_binaries", "server_labels", "teardown"]
