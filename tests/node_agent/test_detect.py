"""A node says what it is: the detect step names the board from the device tree, the board's
agent labels the rest from what it reads on the device. A node registered with no label of
ours becomes a Jetson node within one agent start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from edgetrain.cluster import KubeClient, LocalCluster, api_path
from edgetrain.cluster.nodes import node_specs
from edgetrain.device import detect_board
from edgetrain.device.board import jetpack_for_l4t, parse_l4t_release
from edgetrain.device.sim import BOARDS
from edgetrain.device.sim.twin import DeviceTwin
from edgetrain.node_agent.detect import agent_labels, detect_labels
from edgetrain.operator.phases import NodeInfo
from edgetrain.operator.roles import node_role
from edgetrain.operator.settings import load_settings
from tests.cluster.realnodes import more_nodes, skip_or_fail_without_kubelets
from tests.node_agent.helpers import AgentProcess


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_jetpack_follows_the_l4t_release(board: str) -> None:
    """The twin's JetPack per board (NVIDIA's pairing) is what the agent derives from L4T."""
    spec = BOARDS[board]
    assert jetpack_for_l4t(parse_l4t_release(spec.l4t_release)) == spec.jetpack
    assert jetpack_for_l4t("99.0.0") is None and jetpack_for_l4t(None) is None


def test_the_device_tree_directory_is_read_first(tmp_path: Path) -> None:
    """In a container /sys/firmware is masked: the chart mounts the host's device tree at
    another path, which the agent reads before <root>/proc/device-tree."""
    twin = DeviceTwin("jetson-orin-nano", tmp_path / "twin").build()
    masked = tmp_path / "masked"
    (masked / "etc").mkdir(parents=True)
    (masked / "etc" / "nv_tegra_release").write_text(BOARDS["jetson-orin-nano"].l4t_release)
    assert detect_board(masked).board_id is None  # what a container sees without the mount
    board = detect_board(masked, twin.root / "sys/firmware/devicetree/base")
    assert (board.board_id, board.l4t, board.jetpack) == ("jetson-orin-nano", "36.4.3", "6.2")


def test_detect_names_the_board_and_the_agent_labels_the_rest(tmp_path: Path) -> None:
    twin = DeviceTwin("jetson-nano", tmp_path / "twin").build()
    board = detect_board(twin.root)
    labels, annotations = detect_labels(board)
    # Only the board: the board's DaemonSet selects it; node-kind waits for that agent.
    assert labels == {"edgetrain.io/device-model": "jetson-nano"}
    assert annotations == {"edgetrain.io/device-tree-model": BOARDS["jetson-nano"]
                           .devicetree_model}
    labels, annotations = agent_labels(board, [921_600_000, 76_800_000])
    assert labels == {"edgetrain.io/node-kind": "jetson",
                      "edgetrain.io/device-model": "jetson-nano",
                      "edgetrain.io/l4t": "32.7.1", "edgetrain.io/jetpack": "4.6.1"}
    assert annotations["edgetrain.io/gpu-frequencies-hz"] == "76800000,921600000"
    assert annotations["edgetrain.io/node-agent"] == "running"
    # Not a Jetson (no device tree): nothing to select it by.
    bare = tmp_path / "bare"
    bare.mkdir()
    assert detect_labels(detect_board(bare)) == ({}, {"edgetrain.io/device-tree-model": ""})


@pytest.mark.cluster
def test_a_bare_node_becomes_a_jetson_in_one_agent_start(cluster: LocalCluster,
                                                         kube: KubeClient,
                                                         tmp_path: Path) -> None:
    """A real Orin Nano node registered bare (hostname, os, arch only; amd64, as no pod runs
    on it): the detect step, then the agent's start, and the operator takes it as a Jetson
    with every label read from the twin (L4T, JetPack, the GPU table)."""
    skip_or_fail_without_kubelets()
    specs = node_specs({"jetson-orin-nano": 1}, prefix="bare", bare=True)
    with more_nodes(cluster, kube, tmp_path / "bare", specs, "amd64", ()) as fleet:
        (node,) = fleet.nodes
        name, root = node.name, node.dir / "twin"

        def labels() -> dict[str, str]:
            return dict(kube.get(api_path("v1", "nodes", name=name))["metadata"]["labels"])

        # What a fresh K3s node has (the API server adds the beta.kubernetes.io copies).
        assert {k for k in labels() if not k.startswith("beta.")} == {
            "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch"}
        assert node_role(NodeInfo.of(kube.get(api_path("v1", "nodes", name=name))),
                         load_settings({})).kind == "ignored"
        detect = subprocess.run(
            [sys.executable, "-m", "edgetrain", "node-agent", "--detect-only", "--node-name",
             name, "--sysfs-root", str(root), "--kubeconfig", str(cluster.kubeconfig),
             "--device-tree", str(root / "sys/firmware/devicetree/base")],
            capture_output=True, text=True, timeout=120)
        assert detect.returncode == 0, detect.stderr
        assert labels()["edgetrain.io/device-model"] == "jetson-orin-nano"
        assert "edgetrain.io/node-kind" not in labels()
        agent = AgentProcess(name, root, cluster.kubeconfig, tmp_path / "state.json",
                             tmp_path / "agent.log").start()
        try:
            got = kube.get(api_path("v1", "nodes", name=name))
        finally:
            agent.stop()
        spec = BOARDS["jetson-orin-nano"]
        assert {k: v for k, v in got["metadata"]["labels"].items()
                if k.startswith("edgetrain.io/")} == {
            "edgetrain.io/node-kind": "jetson", "edgetrain.io/device-model": "jetson-orin-nano",
            "edgetrain.io/l4t": "36.4.3", "edgetrain.io/jetpack": spec.jetpack}
        table = got["metadata"]["annotations"]["edgetrain.io/gpu-frequencies-hz"]
        assert [int(f) for f in table.split(",")] == sorted(spec.gpu_freqs_hz)
        role = node_role(NodeInfo.of(got), load_settings({}))
        assert (role.kind, role.why) == ("jetson", "jetson-orin-nano, L4T 36.4.3")
