"""What `cluster up` writes for a real node, checked without running one: addresses in the
cluster's own range, every containerd/kubelet path under the cluster's directory, the settings
this host kind needs, the pause image's layout, the API server's certificate for the Service."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import tarfile
from pathlib import Path

import pytest
import tomllib
from cryptography import x509

from edgetrain.cli import cluster as cli_cluster
from edgetrain.cluster.hostnet import NodeNetwork
from edgetrain.cluster.images import PAUSE_IMAGE, write_pause_archive
from edgetrain.cluster.pki import Pki, ensure_pki
from edgetrain.cluster.realnode import RealNode, server_labels

BENCHMARK_NET = ipaddress.ip_network("198.18.0.0/15")


@pytest.mark.parametrize("slot", [1, 7, 249])
def test_node_network_stays_in_the_benchmarking_range(slot: int) -> None:
    net = NodeNetwork(slot)
    addresses = [net.node_ip, net.pod_gateway, net.api_service_ip]
    assert all(ipaddress.ip_address(a) in BENCHMARK_NET for a in addresses)
    assert ipaddress.ip_network(net.pod_subnet).subnet_of(BENCHMARK_NET)  # type: ignore[arg-type]
    assert ipaddress.ip_address(net.pod_gateway) in ipaddress.ip_network(net.pod_subnet)
    assert ipaddress.ip_address(net.node_ip) not in ipaddress.ip_network(net.pod_subnet)
    assert str(ipaddress.ip_network(net.service_cidr)[1]) == net.api_service_ip
    assert len(net.dummy) <= 15 and len(net.bridge) <= 15  # IFNAMSIZ


@pytest.fixture
def node(tmp_path: Path) -> RealNode:
    pki = ensure_pki(tmp_path / "pki", NodeNetwork(3).api_service_ip)
    assert pki.complete()
    return RealNode(tmp_path, "gpu-server-0", NodeNetwork(3), 6443,
                    server_labels("gpu-server-0"))


def test_containerd_config_keeps_everything_under_the_directory(node: RealNode) -> None:
    node._write_configs(Pki(node.run_dir / "pki"))
    conf = tomllib.loads((node.dir / "ctd" / "config.toml").read_text())
    assert conf["version"] == 4 and conf["imports"] == []
    plugins = conf["plugins"]
    paths = [conf["root"], conf["state"], plugins["io.containerd.server.v1.grpc"]["address"],
             plugins["io.containerd.internal.v1.opt"]["path"],
             plugins["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]
             ["options"]["Root"],
             plugins["io.containerd.cri.v1.runtime"]["cni"]["conf_dir"]]
    assert all(Path(p).is_relative_to(node.run_dir) for p in paths), paths
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True  # root here lacks CAP_SYS_RESOURCE
    assert runtime["disable_apparmor"] is True and runtime["netns_mounts_under_state_dir"]
    assert plugins["io.containerd.nri.v1.nri"]["disable"] is True
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == PAUSE_IMAGE
    assert plugins["io.containerd.grpc.v1.cri"]["stream_server_address"] == "127.0.0.1"


def test_kubelet_and_cni_config_for_this_host(node: RealNode) -> None:
    node._write_configs(Pki(node.run_dir / "pki"))
    kubelet = json.loads((node.dir / "kubelet" / "config.yaml").read_text())
    assert kubelet["failCgroupV1"] is False and kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["makeIPTablesUtilChains"] is False
    assert kubelet["address"] == node.net.node_ip and kubelet["healthzBindAddress"] == "127.0.0.1"
    assert kubelet["imageGCHighThresholdPercent"] == 100
    for key in ("podLogsDir", "volumePluginDir", "tlsCertFile", "tlsPrivateKeyFile"):
        assert Path(kubelet[key]).is_relative_to(node.run_dir), key
    cni = json.loads((node.dir / "cni" / "net.d" / "10-edgetrain.conflist").read_text())
    bridge = cni["plugins"][0]
    assert bridge["bridge"] == node.net.bridge and bridge["ipMasq"] is False
    assert Path(bridge["ipam"]["dataDir"]).is_relative_to(node.run_dir)
    cert = x509.load_pem_x509_certificate((node.dir / "pki" / "kubelet-client.crt").read_bytes())
    assert cert.subject.rfc4514_string() == "CN=system:node:gpu-server-0,O=system:nodes"
    assert "edgetrain.io/virtual" not in node.labels


def test_too_deep_a_directory_is_refused_with_the_reason(tmp_path: Path) -> None:
    deep = RealNode(tmp_path / ("d" * 90), "gpu-server-0", NodeNetwork(3), 6443)
    with pytest.raises(RuntimeError, match="too long for the node's unix sockets"):
        deep.check_path_lengths()


def test_api_server_certificate_names_the_service_address(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path / "pki", "198.19.3.1")
    cert = x509.load_pem_x509_certificate(pki.serving_crt.read_bytes())
    ips = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"127.0.0.1", "10.0.0.1", "198.19.3.1"} <= {str(i) for i in ips.get_values_for_type(
        x509.IPAddress)}
    # Asked for another Service address, the PKI is made again rather than reused.
    again = ensure_pki(tmp_path / "pki", "198.19.4.1")
    cert = x509.load_pem_x509_certificate(again.serving_crt.read_bytes())
    ips = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "198.19.4.1" in {str(i) for i in ips.get_values_for_type(x509.IPAddress)}


def test_pause_archive_is_an_oci_layout_with_consistent_digests(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF not really")
    archive = write_pause_archive(binary, tmp_path / "pause.tar")
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        desc = index["manifests"][0]
        assert desc["annotations"]["io.containerd.image.name"] == PAUSE_IMAGE

        def blob(d: dict[str, str]) -> bytes:
            data = tar.extractfile(f"blobs/sha256/{d['digest'].split(':')[1]}")
            assert data is not None
            raw = data.read()
            assert "sha256:" + hashlib.sha256(raw).hexdigest() == d["digest"]
            return raw

        manifest = json.loads(blob(desc))
        config = json.loads(blob(manifest["config"]))
        layer = blob(manifest["layers"][0])
    assert config["config"]["Entrypoint"] == ["/pause"]
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]
    assert b"ELF not really" in layer


def test_a_host_that_cannot_run_a_kubelet_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    reason = cli_cluster.real_node_unavailable()
    assert reason is not None and reason.startswith("not root")
