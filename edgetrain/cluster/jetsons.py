"""The namespaced nodes of `edgetrain cluster up` (docs/cluster.md, "Real nodes"): one kubelet +
containerd per node (nsnode.py). A Jetson runs over a device twin grafted at its sysfs paths,
arm64 under QEMU (or amd64 where asked), with the arm64 members of the project's images; a GPU
server beyond the host's own (`realnode.py`) runs natively, with the server's images and its
simulated GPUs advertised (`gpus.py`). Every node sees the cluster's shared checkpoint
directory. One state file, `jetsons.json`, holds what `teardown_jetsons` needs;
`jetson_leftovers` checks that nothing stayed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetrain.api.keys import LABEL_EMULATED_ARCH, LABEL_VIRTUAL
from edgetrain.api.pod_security import WORKER_GID, WORKER_UID
from edgetrain.cluster import imagestore, relay
from edgetrain.cluster.archpolicy import ensure_arch_policy
from edgetrain.cluster.boards import NodeProfile, qemu_cpu
from edgetrain.cluster.gpus import advertise_gpus
from edgetrain.cluster.hostlimits import raise_inotify_limits
from edgetrain.cluster.hostnet import (
    NodeNetwork,
    create_dummy,
    link_exists,
    read_ip_forward,
    remove_links,
    restore_ip_forward,
)
from edgetrain.cluster.images import ImageExports, ImportResult
from edgetrain.cluster.node_teardown import STATE_FILE as REAL_SERVER_STATE
from edgetrain.cluster.nodes import VNodeSpec
from edgetrain.cluster.nsnode import MAX_NS_NODES, NsAddress, NsNode, wait_for
from edgetrain.cluster.nsnode_teardown import ns_leftovers, teardown_ns_node
from edgetrain.cluster.pki import Pki, write_atomic
from edgetrain.cluster.process import ManagedProcess, pid_alive, pid_cmdline
from edgetrain.cluster.realnode import server_labels
from edgetrain.kube import KubeClient, api_path, node_schedulable

STATE_FILE = "jetsons.json"
JETSON_IMAGES = ("node-agent", "trainer-cpu")
# A server's images by default: the operator (the chart's agents run on arm64 only). The
# estimate pods' `estimator-cpu` is 5 GB per server (containerd's unpacked copy), so only a
# cluster that estimates asks for it (`--images operator,estimator-cpu`, as the README does).
SERVER_IMAGES = ("operator",)
ARCHES = ("arm64", "amd64")
Log = Callable[[str], None]


def jetson_labels(name: str, prof: NodeProfile, arch: str, bare: bool = False,
                  ) -> dict[str, str]:
    """What the kubelet registers with: the board's labels, real (no `virtual`; none of
    edgetrain's when bare: the chart's agents set them), the architecture the node runs its
    containers in, and whether that is emulated."""
    labels = {k: v for k, v in prof.labels(name, bare).items()
              if k not in (LABEL_VIRTUAL, "kubernetes.io/hostname", "kubernetes.io/os")}
    labels["kubernetes.io/arch"] = arch
    if arch != _host_arch():
        labels[LABEL_EMULATED_ARCH] = arch
    return labels


def _host_arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)


@dataclass
class JetsonFleet:
    """The cluster's real Jetson nodes and what they share: the twins' process, and the
    cluster's interface and API relay where no real server node made them."""

    run_dir: Path
    net: NodeNetwork
    api_port: int
    arch: str = "arm64"
    nodes: list[NsNode] = field(default_factory=list)
    procs: dict[str, ManagedProcess] = field(default_factory=dict)
    owns_net: bool = False
    ip_forward: str = ""
    timings_s: dict[str, float] = field(default_factory=dict)
    # Nodes added to a cluster on a slot of their own: the cluster's CA (the fleet's folder has
    # none) and the API server's address, which its certificate names (not this slot's).
    pki_dir: Path | None = None
    api_ip: str = ""

    def save(self) -> None:
        """Record everything there is to tear down (called after every step)."""
        state = {
            "net": self.net.to_json(), "arch": self.arch, "owns_net": self.owns_net,
            "ip_forward": self.ip_forward,
            "pids": {n: {"pid": p.pid, "argv0": p.argv[0]} for n, p in self.procs.items()},
            "nodes": {n.name: n.state() for n in self.nodes},
        }
        write_atomic(self.run_dir / STATE_FILE, json.dumps(state, indent=2).encode(), 0o644)

    def start(self, specs: Sequence[VNodeSpec], client: KubeClient, images: Sequence[str],
              tag: str, timeout_s: float, log: Log, server_images: Sequence[str] = (),
              shared_dirs: Sequence[str] = (),
              node_images: Mapping[str, Sequence[str]] | None = None) -> list[ImportResult]:
        """Every node Ready and untainted, its images in its containerd (`images` on a Jetson,
        `server_images` on a server, `node_images` by node name instead), a server's GPUs
        advertised; on failure the caller runs `teardown_jetsons`."""
        if len(specs) > MAX_NS_NODES:
            raise RuntimeError(f"at most {MAX_NS_NODES} namespaced nodes per cluster "
                               f"(asked for {len(specs)}): a slot holds no more; start fewer")
        t0 = time.monotonic()
        self.save()
        self._ensure_net()
        raise_inotify_limits(log)
        jetsons = [s for s in specs if s.profile.kind == "jetson"]
        if jetsons and self.arch != _host_arch():
            self.timings_s["arch_policy"] = ensure_arch_policy(client, timeout_s)
        if jetsons:
            self._start_twins(jetsons, timeout_s)
        pki = Pki(self.pki_dir or self.run_dir / "pki")
        by_node = node_images or {}
        wanted = [(by_node.get(spec.name, server_images), f"linux/{_host_arch()}")
                  if spec.profile.kind == "server" else
                  (by_node.get(spec.name, images), f"linux/{self.arch}") for spec in specs]
        results: dict[str, ImportResult] = {}
        seeded: list[bool] = []
        images_s = 0.0
        for i, spec in enumerate(specs):
            server = spec.profile.kind == "server"
            node = NsNode(self.run_dir, spec.name, NsAddress(self.net, i),
                          server_labels(spec.name, spec.profile.board, spec.bare) if server
                          else jetson_labels(spec.name, spec.profile, self.arch, spec.bare),
                          twin_root=None if server else self._twin_root(spec.name),
                          qemu_cpu="" if server or self.arch == _host_arch() else
                          qemu_cpu(spec.profile.board) or "",
                          shared_dirs=tuple(shared_dirs), api_ip=self.api_ip)
            self.nodes.append(node)
            self.save()
            # Before its containerd starts: a prepared store's images, linked (imagestore.py).
            names, platform = wanted[i]
            t_seed = time.monotonic()
            got = imagestore.seed(node.containerd_root, names, tag, platform, log)
            seeded.append(got is not None)
            results.update({f"{spec.profile.kind} {r.ref}": r for r in got or ()})
            images_s += time.monotonic() - t_seed
            node.prepare(pki, timeout_s, self.save)
        left = [(node, spec, w) for node, spec, w, done
                in zip(self.nodes, specs, wanted, seeded, strict=True) if not done]
        uses = Counter((name, platform) for _, _, (names, platform) in left for name in names)
        exports = ImageExports(self.run_dir / "image-exports", tag,
                               frozenset(key for key, n in uses.items() if n > 1))
        t_imports = time.monotonic()
        try:
            for node, spec, (names, platform) in left:
                got = exports.import_into(node.ctr(), names, platform)
                results.update({f"{spec.profile.kind} {r.ref}": r for r in got})
        finally:
            exports.clean()
        self.timings_s["images"] = images_s + time.monotonic() - t_imports
        t_kubelets = time.monotonic()
        for node in self.nodes:
            node.start_kubelet()
        for node in self.nodes:
            path = api_path("v1", "nodes", name=node.name)

            def ready(path: str = path) -> bool:
                found = client.get_or_none(path)
                return found is not None and node_schedulable(found)
            wait_for(ready, timeout_s, "a Ready, untainted Node", node)
        self.timings_s["kubelets_ready"] = time.monotonic() - t_kubelets
        for node, spec in zip(self.nodes, specs, strict=True):
            client.patch(api_path("v1", "nodes", name=node.name),
                         {"metadata": {"annotations": spec.profile.annotations(spec.bare)}},
                         "merge")
            if spec.profile.kind == "server":
                advertise_gpus(client, node.name, spec.profile.gpus, timeout_s)
        self.timings_s["total"] = time.monotonic() - t0
        t = self.timings_s
        arches = sorted({_host_arch() if s.profile.kind == "server" else self.arch
                         for s in specs})
        log(f"namespaced nodes ({', '.join(arches)}) Ready in {t['total']:.1f} s (images "
            f"{t['images']:.1f} s, kubelet start to every node Ready {t['kubelets_ready']:.1f}"
            f" s): " + ", ".join(n.name for n in self.nodes))
        return list(results.values())

    def _twin_root(self, name: str) -> Path:
        return self.run_dir / "nodes" / name / "twin"

    def _ensure_net(self) -> None:
        """The cluster's interface and `kubernetes` Service relay, unless a real server node
        made them (it keeps them until its own teardown). The interface may exist already:
        `claim_network` makes it when it picks the slot."""
        if (self.run_dir / REAL_SERVER_STATE).exists() or self.owns_net:
            return
        self.owns_net, self.ip_forward = True, read_ip_forward()
        self.save()
        create_dummy(self.net)
        self._spawn("api-relay", [
            sys.executable, "-I", str(Path(relay.__file__)), self.net.api_service_ip, "443",
            "127.0.0.1", str(self.api_port)])

    def _spawn(self, name: str, argv: list[str]) -> ManagedProcess:
        proc = ManagedProcess(name, argv, self.run_dir / "logs" / f"{name}.log",
                              detached=True).start()
        self.procs[name] = proc
        self.save()
        return proc

    def _start_twins(self, specs: Sequence[VNodeSpec], timeout_s: float) -> None:
        ready = self.run_dir / "twins.ready"
        ready.unlink(missing_ok=True)
        proc = self._spawn("twins", [
            sys.executable, "-m", "edgetrain.cluster.twinhost", str(ready),
            *(f"{s.profile.board}={self._twin_root(s.name)}" for s in specs)])
        proc.wait_ready(ready.exists, timeout_s, "twins built")

    def all_procs(self) -> dict[str, tuple[ManagedProcess, str]]:
        """Every long-running process, named for `cluster status`, with its argv[0] once it
        runs (a node's processes exec through `sh` and `nsenter`)."""
        out = {n: (p, p.argv[0]) for n, p in self.procs.items()}
        for node in self.nodes:
            out.update({f"{node.name}.{n}": (p, node.runs[n]) for n, p in node.procs.items()})
        return out


def teardown_jetsons(run_dir: Path, log: Log = lambda _m: None) -> bool:
    """Stop the cluster's real Jetson nodes and remove all they left; False if there were
    none. Idempotent."""
    path = run_dir / STATE_FILE
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    for node in state.get("nodes", {}).values():
        teardown_ns_node(node)
    for name in ("twins", "api-relay"):
        rec = state.get("pids", {}).get(name)
        if rec is not None and (pid_cmdline(int(rec["pid"])) or [""])[0] == rec["argv0"]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(rec["pid"]), signal.SIGTERM)
            deadline = time.monotonic() + 5
            while pid_alive(int(rec["pid"])) and time.monotonic() < deadline:
                time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(rec["pid"]), signal.SIGKILL)
    # The twins write their trees under the nodes' directories until they stop: what they
    # wrote after a node's files went is removed now.
    for node in state.get("nodes", {}).values():
        shutil.rmtree(node["dir"], ignore_errors=True)
    if state.get("owns_net"):
        remove_links(NodeNetwork(**state["net"]))
        restore_ip_forward(str(state.get("ip_forward", "")))
    for f in ("twins.ready",):
        (run_dir / f).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        (run_dir / "nodes").rmdir()
    path.unlink(missing_ok=True)
    log(f"real Jetson nodes {', '.join(state.get('nodes', {}))}: stopped; namespaces, "
        "mounts, interfaces, cgroups and files removed")
    return True


def jetson_leftovers(run_dir: Path, state: dict[str, Any]) -> list[str]:
    """What the real Jetson nodes left behind (empty when clean)."""
    found = []
    for node in state.get("nodes", {}).values():
        found += ns_leftovers(node)
    for name, rec in state.get("pids", {}).items():
        if pid_alive(int(rec["pid"])) and (pid_cmdline(int(rec["pid"])) or [""])[0] == \
                rec["argv0"]:
            found.append(f"process {rec['pid']} ({name})")
    if state.get("owns_net") and link_exists(NodeNetwork(**state["net"]).dummy):
        found.append(f"interface {NodeNetwork(**state['net']).dummy}")
    if (run_dir / STATE_FILE).exists():
        found.append(f"state file {run_dir / STATE_FILE}")
    return found


def prepare_shared_dir(path: Path, uid: int = WORKER_UID, gid: int = WORKER_GID) -> None:
    """A host directory every node sees at the same path (the operator's checkpoint root: the
    storage a PVC would be elsewhere), owned by the worker UID as fsGroup makes a volume: pods
    running as it create their folders there. Idempotent; as non-root, only created."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, uid, gid)
        path.chmod(0o2770)
