"""What `cluster up --jetson-runtime real` writes and builds for a namespaced Jetson node,
checked without a kubelet: addresses beside the server node's, the node's own paths, the
runtime that gives containers the twin, and the node's file system made in a mount namespace
(the host's mount table unchanged)."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from edgetrain.api.keys import (
    ANNOTATION_GPU_FREQUENCIES_HZ,
    LABEL_EMULATED_ARCH,
    LABEL_VIRTUAL,
)
from edgetrain.cluster import nodefs
from edgetrain.cluster.boards import profile, qemu_cpu
from edgetrain.cluster.hostnet import NodeNetwork
from edgetrain.cluster.jetsons import jetson_labels
from edgetrain.cluster.nodes import node_specs
from edgetrain.cluster.nsnode import MAX_NS_NODES, NsAddress, NsNode
from edgetrain.cluster.pki import ensure_pki
from edgetrain.cluster.twinruntime import give_device, write_wrapper
from edgetrain.device.sim import DeviceTwin


@pytest.mark.parametrize("slot", [1, 249])
def test_jetson_addresses_sit_beside_the_server_nodes(slot: int) -> None:
    net = NodeNetwork(slot)
    server_pods = ipaddress.ip_network(net.pod_subnet)
    seen: list[ipaddress.IPv4Network] = [server_pods]
    ips = {net.node_ip}
    for i in range(MAX_NS_NODES):
        a = NsAddress(net, i)
        subnet = ipaddress.ip_network(a.pod_subnet)
        assert not any(subnet.overlaps(s) for s in seen), a.pod_subnet
        assert ipaddress.ip_address(a.pod_gateway) in subnet
        assert a.node_ip not in ips and all(
            ipaddress.ip_address(a.node_ip) not in s for s in (*seen, subnet))
        assert a.gateway == net.node_ip and len(a.veth) <= 15
        seen.append(subnet)
        ips.add(a.node_ip)


def test_jetson_labels_are_real_and_say_what_is_emulated() -> None:
    labels = jetson_labels("jetson-nano-0", profile("nano"), "arm64")
    assert LABEL_VIRTUAL not in labels and labels["edgetrain.io/node-kind"] == "jetson"
    assert labels["kubernetes.io/arch"] == "arm64"
    assert labels[LABEL_EMULATED_ARCH] == ("arm64" if os.uname().machine == "x86_64" else None)
    native = jetson_labels("jetson-nano-0", profile("nano"), "amd64")
    assert native["kubernetes.io/arch"] == "amd64" and LABEL_EMULATED_ARCH not in native


def test_bare_jetson_nodes_register_only_what_a_fresh_kubelet_says() -> None:
    """`cluster up --bare --jetson-runtime real`: no label of edgetrain's role (the chart's
    detect step and agents set them), but the emulated architecture, which the node's runtime
    is and the arch policy needs; named as the real nodes are, without the vnode prefix."""
    (spec,) = node_specs({"jetson-nano": 1}, 0, prefix="", bare=True)
    assert spec.name == "jetson-nano-0" and spec.bare
    labels = jetson_labels(spec.name, spec.profile, "arm64", spec.bare)
    assert not any(k.startswith("edgetrain.io/") and k != LABEL_EMULATED_ARCH for k in labels)
    assert labels["kubernetes.io/arch"] == "arm64"
    assert ANNOTATION_GPU_FREQUENCIES_HZ not in spec.profile.annotations(spec.bare)


def _spec(sysfs_opts: list[str]) -> dict[str, object]:
    return {"annotations": {"io.kubernetes.cri.container-type": "container"}, "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": sysfs_opts}]}


def test_runtime_gives_containers_the_nodes_sysfs_and_the_twin(tmp_path: Path) -> None:
    (tmp_path / "run" / "edgetrain-twin").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "nv_tegra_release").write_text("# R32\n")
    spec = _spec(["nosuid", "noexec", "nodev", "ro"])
    assert give_device(spec, str(tmp_path))
    mounts = {m["destination"]: m for m in spec["mounts"]}  # type: ignore[attr-defined]
    assert mounts["/sys"]["type"] == "bind" and mounts["/sys"]["source"] == "/sys"
    assert "rro" in mounts["/sys"]["options"] and "rbind" in mounts["/sys"]["options"]
    assert mounts["/run/edgetrain-twin"]["source"] == f"{tmp_path}/run/edgetrain-twin"
    assert "ro" in mounts["/etc/nv_tegra_release"]["options"]
    privileged = _spec(["nosuid", "noexec", "nodev", "rw"])
    give_device(privileged, str(tmp_path))
    assert "rro" not in privileged["mounts"][1]["options"]  # type: ignore[index]
    sandbox = {"annotations": {"io.kubernetes.cri.container-type": "sandbox"}, "mounts": []}
    assert not give_device(sandbox, str(tmp_path)) and sandbox["mounts"] == []


def test_runtime_gives_containers_the_twins_cpus(tmp_path: Path) -> None:
    """The board's CPUs, which the node's /sys leaves the host's: read-only under a restricted
    pod's /sys, and in place of the host's for a hostPath of them (the agent's, read-write)."""
    cpus = tmp_path / "sys" / "devices" / "system" / "cpu"
    cpus.mkdir(parents=True)
    restricted = _spec(["nosuid", "noexec", "nodev", "ro"])
    give_device(restricted, str(tmp_path))
    (bound,) = [m for m in restricted["mounts"]  # type: ignore[attr-defined]
                if m["destination"] == "/sys/devices/system/cpu"]
    assert bound["source"] == str(cpus) and "rro" in bound["options"]
    agent = _spec(["nosuid", "noexec", "nodev", "ro"])
    agent["mounts"].append({"destination": "/sys/devices/system/cpu",  # type: ignore[attr-defined]
                            "type": "bind", "source": "/sys/devices/system/cpu",
                            "options": ["rbind", "rprivate", "rw"]})
    give_device(agent, str(tmp_path))
    (bound,) = [m for m in agent["mounts"]  # type: ignore[attr-defined]
                if m["destination"] == "/sys/devices/system/cpu"]
    assert bound["source"] == str(cpus) and "rw" in bound["options"]
    no_cpus = _spec(["nosuid", "noexec", "nodev", "ro"])
    give_device(no_cpus, str(tmp_path / "elsewhere"))
    assert all(m["destination"] != "/sys/devices/system/cpu"
               for m in no_cpus["mounts"])  # type: ignore[attr-defined]


def test_runtime_wrapper_edits_the_bundle_on_create_only(tmp_path: Path) -> None:
    fake_runc = tmp_path / "runc"
    fake_runc.write_text("#!/bin/sh\necho \"runc $*\"\n")
    fake_runc.chmod(0o755)
    twin = tmp_path / "twin"
    (twin / "run" / "edgetrain-twin").mkdir(parents=True)
    wrapper = write_wrapper(tmp_path / "bin" / "runc", str(fake_runc), twin, sys.executable,
                            qemu_cpu="cortex-a57")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({**_spec(["ro"]), "process": {"env": []}}))
    state = subprocess.run([str(wrapper), "--root", "/r", "state", "x"], capture_output=True,
                           text=True, check=True)
    assert state.stdout.strip() == "runc --root /r state x"
    assert "sysfs" in (bundle / "config.json").read_text()
    subprocess.run([str(wrapper), "--root", "/r", "create", "--bundle", str(bundle), "x"],
                   check=True, capture_output=True)
    edited = json.loads((bundle / "config.json").read_text())
    assert [m["type"] for m in edited["mounts"]] == ["proc", "bind", "bind"]
    assert edited["process"]["env"] == ["QEMU_CPU=cortex-a57"]


def test_an_emulated_boards_containers_get_its_core_as_qemus_cpu(tmp_path: Path) -> None:
    """QEMU's model of the board's core (not `max`, ARMv9 with SVE) in each container's
    environment, where binfmt's emulator reads it; a pod's own QEMU_CPU is kept; none for a
    sandbox or on a native node."""
    assert qemu_cpu("nano") == "cortex-a57" and qemu_cpu("jetson-agx-orin") == "cortex-a76"
    assert qemu_cpu("gpu-server") is None
    spec = {**_spec(["ro"]), "process": {"env": ["PATH=/usr/bin"]}}
    assert give_device(spec, str(tmp_path), "cortex-a57")
    assert spec["process"]["env"] == ["PATH=/usr/bin", "QEMU_CPU=cortex-a57"]  # type: ignore[index]
    own = {**_spec(["ro"]), "process": {"env": ["QEMU_CPU=max"]}}
    give_device(own, str(tmp_path), "cortex-a57")
    assert own["process"]["env"] == ["QEMU_CPU=max"]  # type: ignore[index]
    native = {**_spec(["ro"]), "process": {"env": []}}
    give_device(native, str(tmp_path))
    assert native["process"]["env"] == []  # type: ignore[index]
    sandbox = {"annotations": {"io.kubernetes.cri.container-type": "sandbox"},
               "process": {"env": []}, "mounts": []}
    assert not give_device(sandbox, str(tmp_path), "cortex-a57")
    assert sandbox["process"]["env"] == []  # type: ignore[index]


def test_node_configs_use_its_own_paths_and_cgroup_root(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path / "pki", NodeNetwork(3).api_service_ip)
    node = NsNode(tmp_path, "jetson-nano-0", NsAddress(NodeNetwork(3), 1),
                  twin_root=tmp_path / "nodes" / "jetson-nano-0" / "twin",
                  shared_dirs=("/var/lib/edgetrain/checkpoints",))
    node._write_configs(pki)
    # The shared directory's mount point, inside the node's own /var/lib/edgetrain.
    assert (node.dir / "edgetrain" / "checkpoints").is_dir()
    kubelet = json.loads((node.dir / "kubelet.yaml").read_text())
    assert kubelet["cgroupRoot"] == "/edgetrain3-jetson-nano-0"
    assert kubelet["address"] == "198.18.3.3" and kubelet["failCgroupV1"] is False
    assert kubelet["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"
    conf = tomllib.loads((node.dir / "containerd.toml").read_text())
    runc = conf["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]
    assert runc["options"]["BinaryName"] == str(node.dir / "bin" / "runc")
    assert conf["plugins"]["io.containerd.nri.v1.nri"]["disable"] is True
    spec = json.loads((node.dir / "nodefs.json").read_text())
    assert set(spec["binds"]) >= {"/var/lib/kubelet", "/var/log", "/var/lib/edgetrain"}
    assert all(Path(s).is_relative_to(node.dir) for s in spec["binds"].values())
    assert spec["writable"] == [str(node.dir)]
    assert spec["shared"] == ["/var/lib/edgetrain/checkpoints"]
    kubeconfig = (node.dir / "kubelet.kubeconfig").read_text()
    assert "https://198.19.3.1:443" in kubeconfig


@pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root")
def test_node_file_system_grafts_the_twin_and_leaves_the_host_alone(tmp_path: Path) -> None:
    """nodefs.py in `unshare --mount --net`: the twin's Nano devfreq at its Jetson path, writes
    reaching the twin, the host's entries read-only, nothing in the host's mount table."""
    twin = DeviceTwin("jetson-nano", tmp_path / "twin").build()
    for d in ("kubelet", "log", "state", "state/shared", "host-shared"):
        (tmp_path / d).mkdir()
    spec = {"binds": {"/var/lib/kubelet": str(tmp_path / "kubelet"),
                      "/var/log": str(tmp_path / "log"), "/var/lib/edgetrain": str(tmp_path /
                                                                                   "state")},
            # A host directory the node sees at the same path, under its own /var/lib/edgetrain.
            "shared": [str(tmp_path / "host-shared")],
            "twin_root": str(twin.root), "twin_skip": ["/sys/devices/system/cpu"],
            "writable": [str(tmp_path / "state"), str(twin.root)]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    devfreq = "/sys/devices/gpu.0/devfreq/57000000.gpu"
    # A host path the node must not write (removed below if it was written after all).
    host_probe = Path(f"/var/lib/.edgetrain-nodefs-probe-{os.getpid()}")
    probe = (f"cat {devfreq}/max_freq /sys/firmware/devicetree/base/model; echo; "
             f"echo 76800000 > {devfreq}/max_freq; ls /sys/class/net; "
             f"touch /var/lib/kubelet/k /var/log/l {tmp_path}/host-shared/s; "
             f"touch {host_probe} 2>&1; "
             "cat /etc/nv_tegra_release; ls /sys/fs/cgroup")
    try:
        res = subprocess.run(
            ["unshare", "--mount", "--net", "--propagation", "private", "--", sys.executable,
             "-I", "-S", nodefs.__file__, str(tmp_path / "spec.json"),
             str(tmp_path / "state" / "ready"), "--", "sh", "-c", probe],
            capture_output=True, text=True, timeout=60, check=False)
        assert not host_probe.exists()
    finally:
        host_probe.unlink(missing_ok=True)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.startswith("921600000\nNVIDIA Jetson Nano"), out
    assert (tmp_path / "twin" / devfreq[1:] / "max_freq").read_text().strip() == "76800000"
    assert "\nlo\n" in out and "eth0" not in out  # the node's own network namespace
    assert "Read-only file system" in out and "R32 (release)" in out and "memory" in out
    assert (tmp_path / "kubelet" / "k").exists() and (tmp_path / "log" / "l").exists()
    assert (tmp_path / "host-shared" / "s").exists()
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
