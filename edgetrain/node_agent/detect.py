"""What a node says it is, read on the device, as its Node labels: the chart's detect step
(on every arm64 node, before any board is known) and the board's agent (the full set).

The detect step only names the board (`device-model`), which is what the board's DaemonSet
selects; the agent then sets everything else with `node-kind=jetson` in the same patch, so the
operator never sees a Jetson with half of its labels."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from edgetrain.api.keys import (
    ANNOTATION_DEVICE_TREE_MODEL,
    ANNOTATION_GPU_FREQUENCIES_HZ,
    ANNOTATION_NODE_AGENT,
    LABEL_DEVICE_MODEL,
    LABEL_JETPACK,
    LABEL_L4T,
    LABEL_NODE_KIND,
    NODE_KIND_JETSON,
)
from edgetrain.device import BoardIdentity, detect_board
from edgetrain.kube import KubeClient
from edgetrain.node_agent import kube as k

log = logging.getLogger("edgetrain.node_agent")

Labels = tuple[dict[str, str], dict[str, str]]  # (labels, annotations)


def detect_labels(board: BoardIdentity) -> Labels:
    """The detect step's patch: the board's name where it is a Jetson edgetrain knows, and
    the devicetree model either way (empty: the node has no device tree)."""
    labels = {LABEL_DEVICE_MODEL: board.board_id} if board.board_id else {}
    return labels, {ANNOTATION_DEVICE_TREE_MODEL: board.model or ""}


def agent_labels(board: BoardIdentity, gpu_freqs_hz: Sequence[int]) -> Labels:
    """The board agent's patch: node kind, device model, L4T and JetPack releases (where
    known), the GPU frequency table, and that the agent runs."""
    labels = {LABEL_NODE_KIND: NODE_KIND_JETSON,
              LABEL_DEVICE_MODEL: board.board_id or "unknown"}
    if board.l4t:
        labels[LABEL_L4T] = board.l4t
    if board.jetpack:
        labels[LABEL_JETPACK] = board.jetpack
    annotations = {
        ANNOTATION_GPU_FREQUENCIES_HZ: ",".join(str(f) for f in sorted(gpu_freqs_hz)),
        ANNOTATION_NODE_AGENT: "running",
        ANNOTATION_DEVICE_TREE_MODEL: board.model or "",
    }
    return labels, annotations


def detect_and_label(client: KubeClient, node: str, root: str | os.PathLike[str] | None,
                     device_tree: str | os.PathLike[str] | None) -> BoardIdentity:
    """Read the board and label the Node with what the detect step knows (one patch)."""
    board = detect_board(root, device_tree)
    labels, annotations = detect_labels(board)
    k.label_node(client, node, labels, annotations)
    if board.board_id:
        log.info("node %s is a %s (%r): labelled %s=%s", node, board.board_id, board.model,
                 LABEL_DEVICE_MODEL, board.board_id)
    else:
        log.info("node %s is not a Jetson edgetrain knows (devicetree model %r); no board"
                 " agent will run there (opt out: label it edgetrain.io/node-agent=disabled)",
                 node, board.model or "none")
    return board
