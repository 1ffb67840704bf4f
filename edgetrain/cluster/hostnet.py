"""The network of a real node, all of it the cluster's own: an interface (dummy, or a bridge
without ports where the kernel has no dummy driver) that holds the
node's address and the `kubernetes` Service's address, a CNI bridge with a pod subnet, both in
198.18.0.0/15 (reserved for benchmarking networks: never routed outside this machine), and no
iptables rule. Also: whether this host can run a kubelet at all, and why not."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

CNI_BIN_DIR = Path("/usr/lib/cni")
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
# Interfaces are named <prefix><slot>: the slot is the cluster's place in 198.18.<slot>.0/24.
DUMMY_PREFIX = "etnode"
BRIDGE_PREFIX = "etcni"
SLOTS = range(1, 250)
# Host-wide: held while a slot is picked and claimed (its interface created), so two clusters
# started at once (`cluster up`, a test session's fleet, another xdist worker) never share one.
SLOT_LOCK = Path(os.environ.get("EDGETRAIN_SLOT_LOCK", "/run/edgetrain-slots.lock"))


@dataclass(frozen=True)
class NodeNetwork:
    """Addresses and interface names of one cluster's real node."""

    slot: int

    @property
    def dummy(self) -> str:
        """The interface `cluster up` creates for the node's addresses."""
        return f"{DUMMY_PREFIX}{self.slot}"

    @property
    def bridge(self) -> str:
        """The CNI bridge (the bridge plugin creates it with the first pod)."""
        return f"{BRIDGE_PREFIX}{self.slot}"

    @property
    def node_ip(self) -> str:
        """The Node's InternalIP: the kubelet serves here (10250)."""
        return f"198.18.{self.slot}.1"

    @property
    def pod_subnet(self) -> str:
        """Pod IPs (host-local IPAM); the bridge holds the first as the pods' gateway."""
        return f"198.18.{self.slot}.128/25"

    @property
    def pod_gateway(self) -> str:
        """The bridge's address."""
        return f"198.18.{self.slot}.129"

    @property
    def service_cidr(self) -> str:
        """--service-cluster-ip-range: its first address is the `kubernetes` Service."""
        return f"198.19.{self.slot}.0/24"

    @property
    def api_service_ip(self) -> str:
        """The `kubernetes` Service's ClusterIP, on the dummy interface: pods reach the API
        server there through the cluster's relay (no kube-proxy, no iptables)."""
        return f"198.19.{self.slot}.1"

    @property
    def network_name(self) -> str:
        """The CNI network's name (host-local's allocations and libcni's cache use it)."""
        return f"edgetrain-{self.slot}"

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def link_exists(name: str) -> bool:
    """True if a network interface of that name exists."""
    return Path("/sys/class/net", name).exists()


def _used_addresses() -> list[ipaddress.IPv4Interface]:
    out = _ip("-j", "-4", "addr", "show", check=False).stdout or "[]"
    found = []
    for link in json.loads(out):
        for a in link.get("addr_info", []):
            found.append(ipaddress.IPv4Interface(f"{a['local']}/{a['prefixlen']}"))
    return found


def pick_network() -> NodeNetwork:
    """The first slot whose interfaces and subnets nothing on this host uses."""
    used = _used_addresses()
    for slot in SLOTS:
        net = NodeNetwork(slot)
        nets = [ipaddress.ip_network(f"198.18.{slot}.0/24"), ipaddress.ip_network(net.service_cidr)]
        # etv<slot>n0: the first namespaced Jetson node's veth (nsnode.py).
        if link_exists(net.dummy) or link_exists(net.bridge) or link_exists(f"etv{slot}n0"):
            continue
        if any(a.network.overlaps(n) for a in used for n in nets):
            continue
        return net
    raise RuntimeError("no free 198.18.N.0/24 slot for a real node on this host")


def claim_network() -> NodeNetwork:
    """Pick a free slot and create its interface at once, under a host-wide lock: the
    interface is the claim (`pick_network` skips a slot whose interface exists)."""
    SLOT_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with SLOT_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        net = pick_network()
        create_dummy(net)
        return net


def add_local_link(name: str) -> str:
    """Create an interface for local addresses only: a dummy one, or where the kernel has no
    dummy driver (this machine kind), a bridge without ports. Returns "" or the error."""
    res = _ip("link", "add", name, "type", "dummy", check=False)
    if res.returncode != 0 and "File exists" not in res.stderr:
        res = _ip("link", "add", name, "type", "bridge", check=False)
    if res.returncode != 0 and "File exists" not in res.stderr:
        return res.stderr.strip()
    return ""


def create_dummy(net: NodeNetwork) -> None:
    """The node's interface with the node's and the API Service's addresses."""
    if not link_exists(net.dummy):
        problem = add_local_link(net.dummy)
        if problem:
            raise RuntimeError(f"cannot create interface {net.dummy}: {problem}")
    for address in (net.node_ip, net.api_service_ip):
        res = _ip("addr", "add", f"{address}/32", "dev", net.dummy, check=False)
        # Made before (`claim_network`): iproute2 says "File exists" or "already assigned".
        if res.returncode != 0 and not any(
                m in res.stderr for m in ("File exists", "already assigned")):
            raise RuntimeError(f"ip addr add {address} dev {net.dummy}: {res.stderr.strip()}")
    _ip("link", "set", net.dummy, "up")


def remove_links(net: NodeNetwork) -> None:
    """Delete the dummy interface and the CNI bridge (the pods' veths went with their netns)."""
    for name in (net.dummy, net.bridge):
        if link_exists(name):
            _ip("link", "del", name, check=False)


def read_ip_forward() -> str:
    """The host's net.ipv4.ip_forward (the bridge plugin's isGateway turns it on)."""
    try:
        return IP_FORWARD.read_text().strip()
    except OSError:
        return ""


def restore_ip_forward(value: str) -> None:
    """Put net.ipv4.ip_forward back as `cluster up` found it."""
    if value and read_ip_forward() != value:
        with contextlib.suppress(OSError):
            IP_FORWARD.write_text(value + "\n")


def cannot_run_kubelet() -> str | None:
    """Why this host cannot run a real node (one line), or None if it can."""
    if os.geteuid() != 0:
        return "not root (a kubelet and containerd need root)"
    if not Path("/sys/fs/cgroup").is_dir() or not (
        Path("/sys/fs/cgroup/cgroup.controllers").exists()
        or Path("/sys/fs/cgroup/memory").is_dir()
    ):
        return "no cgroup file system at /sys/fs/cgroup"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to make the node's interface"
    if shutil.which("runc") is None:
        return "no runc (`make cluster-bins` installs Debian's runc)"
    if not (CNI_BIN_DIR / "bridge").exists() or not (CNI_BIN_DIR / "host-local").exists():
        return f"no CNI plugins in {CNI_BIN_DIR} (`make cluster-bins` installs them)"
    # Try one link: the dummy driver may be a module, built in, or missing.
    probe = f"{DUMMY_PREFIX}probe"
    problem = add_local_link(probe)
    _ip("link", "del", probe, check=False)
    if problem:
        return f"cannot create a network interface: {problem}"
    return None
