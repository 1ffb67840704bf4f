"""A real Kubernetes control plane as local processes on 127.0.0.1 (etcd, apiserver, KCM,
scheduler, kwok), in the style of envtest and kwokctl's binary runtime."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetrain.cluster import binaries
from edgetrain.cluster.kubeconfig import write_kubeconfig
from edgetrain.cluster.pki import Pki, ensure_pki, write_atomic
from edgetrain.cluster.process import (
    ComponentError,
    ManagedProcess,
    kill_group,
    pid_alive,
    pid_cmdline,
    rss_bytes,
)
from edgetrain.kube import KubeClient

LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "10.0.0.0/24"
KWOK_POD_CIDR = "10.0.1.0/24"  # fake pod IPs kwok writes into status; never routed or bound
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
STATE_FILE = "state.json"


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _http_ok(url: str) -> bool:
    # Component health endpoints serve self-signed certs on loopback; only the status matters.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=3.0, context=ctx) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class Component:
    """A running component: its process (when this interpreter started it) or just its pid."""

    name: str
    pid: int
    argv0: str
    log: Path
    proc: ManagedProcess | None = None

    def alive(self) -> bool:
        """True if the pid still runs the same executable (guards against pid reuse)."""
        if self.proc is not None:
            return self.proc.alive()
        cmd = pid_cmdline(self.pid)
        return pid_alive(self.pid) and bool(cmd) and cmd[0] == self.argv0

    def stop(self, grace_s: float) -> None:
        """SIGTERM then SIGKILL the component's process group."""
        if self.proc is not None:
            self.proc.stop(grace_s)
        elif self.alive():
            kill_group(self.pid, grace_s)


@dataclass
class LocalCluster:
    """Control plane rooted at `run_dir`: pki/, etcd/, logs/, kubeconfig, state.json."""

    run_dir: Path
    with_kwok: bool = True
    detached: bool = False  # True: processes outlive this interpreter (edgetrain cluster up)
    # kwok's stage file (default: upstream's fast stages from `make cluster-bins`); a bench
    # passes its own so that pods complete when it says, not at once.
    kwok_config: Path | None = None
    apiserver_args: list[str] = field(default_factory=list)  # extra flags, e.g. an audit log
    # kube-controller-manager flags after the defaults (a bench matches its node grace period
    # to the kwok fleet's leases)
    kcm_args: list[str] = field(default_factory=list)
    # kwok's node Leases: their duration (renewed every quarter of it, as the kubelet does)
    kwok_lease_duration_s: int = 40
    # Its first address is the `kubernetes` Service; a real node's pods reach it (realnode.py).
    service_cidr: str = SERVICE_CIDR
    components: dict[str, Component] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    # --- paths ---

    @property
    def pki(self) -> Pki:
        """The cluster's PKI files."""
        return Pki(self.run_dir / "pki")

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (system:masters)."""
        return self.run_dir / "kubeconfig"

    @property
    def server(self) -> str:
        """https URL of the API server."""
        return f"https://{LOOPBACK}:{self.ports['apiserver']}"

    @property
    def api_service_ip(self) -> str:
        """ClusterIP of the `kubernetes` Service: the service range's first address."""
        return str(ipaddress.ip_network(self.service_cidr)[1])

    def log_path(self, name: str) -> Path:
        """Log file of a component."""
        return self.run_dir / "logs" / f"{name}.log"

    # --- state file, so `cluster down` in another process finds the pids ---

    def _save_state(self) -> None:
        state = {
            "k8s_version": binaries.K8S_VERSION,
            "ports": self.ports,
            "service_cidr": self.service_cidr,
            "kubeconfig": str(self.kubeconfig),
            "components": {
                c.name: {"pid": c.pid, "argv0": c.argv0, "log": str(c.log)}
                for c in self.components.values()
            },
        }
        write_atomic(self.run_dir / STATE_FILE, json.dumps(state, indent=2).encode())

    @classmethod
    def attach(cls, run_dir: Path) -> LocalCluster | None:
        """The cluster recorded in run_dir/state.json (None if there is none)."""
        try:
            state: dict[str, Any] = json.loads((run_dir / STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        cluster = cls(run_dir=run_dir, ports={k: int(v) for k, v in state["ports"].items()},
                      service_cidr=state.get("service_cidr", SERVICE_CIDR))
        for name, c in state["components"].items():
            cluster.components[name] = Component(name, int(c["pid"]), c["argv0"], Path(c["log"]))
        return cluster

    def healthy(self) -> bool:
        """All recorded components alive and the API server ready."""
        if not self.components or not all(c.alive() for c in self.components.values()):
            return False
        with contextlib.suppress(Exception), self.client() as client:
            return client.readyz()
        return False

    # --- lifecycle ---

    def client(self) -> KubeClient:
        """Admin client (close it, or use it as a context manager)."""
        return KubeClient.from_kubeconfig(self.kubeconfig)

    def start(self, timeout_s: float = 120.0) -> LocalCluster:
        """Start every component and wait for readiness; reuse a healthy running cluster."""
        existing = LocalCluster.attach(self.run_dir)
        if existing is not None:
            if existing.healthy():
                self.components, self.ports = existing.components, existing.ports
                return self
            existing.stop()  # stale or half-started: clean it up before starting over
        binaries.ensure_binaries()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        pki = ensure_pki(self.run_dir / "pki", self.api_service_ip)
        names = ["etcd_client", "etcd_peer", "apiserver", "kcm", "scheduler", "kwok"]
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        self._write_kubeconfigs(pki)
        try:
            self._start_etcd(timeout_s)
            self._start_apiserver(pki, timeout_s)
            self._start_kcm(pki, timeout_s)
            self._start_scheduler(timeout_s)
            if self.with_kwok:
                self._start_kwok(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop components in reverse start order; idempotent."""
        for name in reversed(list(self.components)):
            self.components[name].stop(grace_s)
        self.components.clear()
        (self.run_dir / STATE_FILE).unlink(missing_ok=True)

    def restart(self, name: str, *, kill: bool = False, down_s: float = 0.0,
                timeout_s: float = 120.0) -> float:
        """Stop one component (SIGTERM, or SIGKILL with `kill`), keep it down `down_s`, start
        it again on the same port with the same files; returns the seconds it was not serving.
        etcd is not restartable here: every etcd start is a fresh, empty cluster."""
        starters = {
            "kube-apiserver": lambda: self._start_apiserver(self.pki, timeout_s),
            "kube-controller-manager": lambda: self._start_kcm(self.pki, timeout_s),
            "kube-scheduler": lambda: self._start_scheduler(timeout_s),
            "kwok": lambda: self._start_kwok(timeout_s),
        }
        if name not in starters or name not in self.components:
            raise ValueError(f"cannot restart {name!r}: restartable running components are "
                             f"{sorted(set(starters) & set(self.components))}")
        started = time.monotonic()
        self.components.pop(name).stop(0.0 if kill else 5.0)
        time.sleep(down_s)
        starters[name]()
        return time.monotonic() - started

    def adopt(self, name: str, proc: ManagedProcess, runs: str | None = None) -> None:
        """Record an extra process (e.g. a node's relay) so stop()/`cluster down` end it;
        `runs`: its argv[0] once it has exec'd another program (what `alive` checks)."""
        self.components[name] = Component(name, proc.pid, runs or proc.argv[0], proc.log_path,
                                          proc)
        self._save_state()

    def memory_rss_bytes(self) -> dict[str, int]:
        """Resident memory of each running component."""
        return {n: rss_bytes(c.pid) for n, c in self.components.items() if c.alive()}

    # --- components ---

    def _spawn(self, name: str, argv: list[str]) -> ManagedProcess:
        proc = ManagedProcess(name, argv, self.log_path(name), detached=self.detached).start()
        self.components[name] = Component(name, proc.pid, proc.argv[0], proc.log_path, proc)
        self._save_state()
        return proc

    def _write_kubeconfigs(self, pki: Pki) -> None:
        for who in ("admin", "kube-controller-manager", "kube-scheduler", "kwok"):
            path = self.kubeconfig if who == "admin" else self.run_dir / f"{who}.kubeconfig"
            write_kubeconfig(
                path,
                server=self.server,
                ca_crt=pki.ca_crt,
                client_crt=pki.client_crt(who),
                client_key=pki.client_key(who),
                user=who,
            )

    def _start_etcd(self, timeout_s: float) -> None:
        data_dir = self.run_dir / "etcd"
        shutil.rmtree(data_dir, ignore_errors=True)  # every start is a fresh cluster
        client_url = f"http://{LOOPBACK}:{self.ports['etcd_client']}"
        peer_url = f"http://{LOOPBACK}:{self.ports['etcd_peer']}"
        proc = self._spawn("etcd", [
            str(binaries.binary("etcd")),
            "--name=default",
            f"--data-dir={data_dir}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            "--listen-metrics-urls=",
            "--unsafe-no-fsync=true",  # test data: skip fsync, much faster on slow disks
            "--quota-backend-bytes=2147483648",
            "--log-level=warn",
        ])
        proc.wait_ready(lambda: _http_ok(f"{client_url}/health"), timeout_s, "healthy")

    def _start_apiserver(self, pki: Pki, timeout_s: float) -> None:
        proc = self._spawn("kube-apiserver", [
            str(binaries.binary("kube-apiserver")),
            f"--etcd-servers=http://{LOOPBACK}:{self.ports['etcd_client']}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={self.ports['apiserver']}",
            f"--tls-cert-file={pki.serving_crt}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_crt}",
            f"--cert-dir={self.run_dir / 'apiserver-certs'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--authorization-mode=Node,RBAC",
            # kubectl logs: reach virtual nodes' kubelet endpoints on their own addresses,
            # verify their serving certs and show them our client cert.
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={pki.ca_crt}",
            f"--kubelet-client-certificate={pki.client_crt('apiserver-kubelet-client')}",
            f"--kubelet-client-key={pki.client_key('apiserver-kubelet-client')}",
            "--allow-privileged=true",
            # 127.0.0.1 is invalid in the `kubernetes` Endpoints; no reconciler, no failure.
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
            "--v=1",
            *self.apiserver_args,
        ])
        with KubeClient.from_kubeconfig(self.kubeconfig) as client:
            proc.wait_ready(client.readyz, timeout_s, "ready (/readyz)")

    def _start_kcm(self, pki: Pki, timeout_s: float) -> None:
        kc = self.run_dir / "kube-controller-manager.kubeconfig"
        proc = self._spawn("kube-controller-manager", [
            str(binaries.binary("kube-controller-manager")),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--leader-elect=false",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={self.ports['kcm']}",
            f"--cert-dir={self.run_dir / 'kcm-certs'}",
            f"--root-ca-file={pki.ca_crt}",
            f"--service-account-private-key-file={pki.sa_key}",
            "--use-service-account-credentials=true",
            f"--cluster-signing-cert-file={pki.ca_crt}",
            f"--cluster-signing-key-file={pki.ca_key}",
            "--controllers=*",
            "--v=1",
            *self.kcm_args,
        ])
        url = f"https://{LOOPBACK}:{self.ports['kcm']}/healthz"
        proc.wait_ready(lambda: _http_ok(url), timeout_s, "healthy (/healthz)")

    def _start_scheduler(self, timeout_s: float) -> None:
        kc = self.run_dir / "kube-scheduler.kubeconfig"
        proc = self._spawn("kube-scheduler", [
            str(binaries.binary("kube-scheduler")),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--leader-elect=false",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={self.ports['scheduler']}",
            f"--cert-dir={self.run_dir / 'scheduler-certs'}",
            "--v=1",
        ])
        url = f"https://{LOOPBACK}:{self.ports['scheduler']}/readyz"
        proc.wait_ready(lambda: _http_ok(url), timeout_s, "ready (/readyz)")

    def _start_kwok(self, timeout_s: float) -> None:
        proc = self._spawn("kwok", [
            str(binaries.binary("kwok")),
            f"--kubeconfig={self.run_dir / 'kwok.kubeconfig'}",
            # kwok >= v0.8 has no built-in stages; build-k8s.sh installs upstream's.
            f"--config={self.kwok_config or binaries.bin_dir() / 'kwok-stages.yaml'}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--manage-nodes-with-label-selector=",
            "--manage-single-node=",
            f"--cidr={KWOK_POD_CIDR}",
            f"--node-ip={LOOPBACK}",
            f"--node-lease-duration-seconds={self.kwok_lease_duration_s}",
            f"--server-address={LOOPBACK}:{self.ports['kwok']}",
        ])
        url = f"http://{LOOPBACK}:{self.ports['kwok']}/healthz"
        proc.wait_ready(lambda: _http_ok(url), timeout_s,
                        "healthy (/healthz)")


__all__ = ["CONTROL_PLANE", "ComponentError", "LocalCluster", "free_ports"]
