"""Which nodes the operator takes as Jetsons and as GPU servers, and why the others are
ignored; which image each phase runs, and whether it has a member for a node's architecture.
Pure functions over `NodeInfo` and the settings (the operator's decisions and `edgetrain
doctor` share them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from edgetrain.api.keys import (
    ANNOTATION_DEVICE_TREE_MODEL,
    LABEL_ARCH,
    LABEL_DEVICE_MODEL,
    LABEL_L4T,
    LABEL_NODE_AGENT_OPT_OUT,
    LABEL_NODE_KIND,
    NODE_AGENT_DISABLED,
    NODE_KIND_IDLE,
    NODE_KIND_JETSON,
    NODE_KIND_SERVER,
)
from edgetrain.kube import Obj
from edgetrain.operator.phases import NodeInfo, matches
from edgetrain.operator.settings import OperatorSettings

Kind = Literal["jetson", "server", "ignored"]
ImageRole = Literal["estimator", "trainer"]
# What runs which image: estimation on the GPU servers, profiling and training on the Jetsons.
PHASE_IMAGES: dict[str, ImageRole] = {"estimate": "estimator", "profile": "trainer",
                                      "train": "trainer"}


@dataclass(frozen=True)
class NodeRole:
    """A node as the operator sees it, and why."""

    kind: Kind
    why: str


def node_arch(node: NodeInfo) -> str | None:
    """`kubernetes.io/arch` (the kubelet sets it on every node)."""
    return node.label_map.get(LABEL_ARCH)


def is_jetson_board(device_model: str | None) -> bool:
    """A device model of edgetrain's Jetson boards (every board id starts `jetson-`)."""
    return bool(device_model) and str(device_model).startswith("jetson-")


def node_role(node: NodeInfo, settings: OperatorSettings,
              annotations: dict[str, str] | None = None) -> NodeRole:
    """Jetson: carries the jetsonSelector (the agent's `node-kind=jetson`) and a device model.
    GPU server: not a Jetson, carries the serverSelector, and either advertises
    `nvidia.com/gpu` (the NVIDIA device plugin; not enough on arm64, where Jetsons advertise it
    too) or is labelled `node-kind=server`. Anything else is ignored, with the reason.
    `annotations` (optional) only refine that reason."""
    labels = node.label_map
    kind = labels.get(LABEL_NODE_KIND)
    model = labels.get(LABEL_DEVICE_MODEL)
    if kind == NODE_KIND_IDLE:
        return NodeRole("ignored", f"a kwok idle node ({LABEL_NODE_KIND}={NODE_KIND_IDLE})")
    if matches(labels, settings.jetson_selector) and kind != NODE_KIND_SERVER:
        if model:
            l4t = labels.get(LABEL_L4T)
            return NodeRole("jetson", model + (f", L4T {l4t}" if l4t else ""))
        if kind == NODE_KIND_JETSON:
            return NodeRole("ignored", f"{LABEL_NODE_KIND}={NODE_KIND_JETSON} but no"
                                       f" {LABEL_DEVICE_MODEL} label")
    if kind == NODE_KIND_JETSON or is_jetson_board(model):
        return NodeRole("ignored", f"{model or 'a Jetson'} without"
                                   f" {_kv(settings.jetson_selector)}: its board's node agent has"
                                   " not labelled it yet (see its pod in the agents' namespace)")
    gpus = node.allocatable_gpus
    if gpus > 0 and kind != NODE_KIND_SERVER and node_arch(node) == "arm64":
        # A Jetson's device plugin advertises nvidia.com/gpu too, before its agent labels it.
        return NodeRole("ignored", f"arm64 with nvidia.com/gpu: {gpus}, not labelled by a node"
                                   " agent yet; an arm64 GPU server needs the label"
                                   f" {LABEL_NODE_KIND}={NODE_KIND_SERVER}")
    if gpus > 0 or kind == NODE_KIND_SERVER:
        how = (f"nvidia.com/gpu: {gpus}" if gpus > 0
               else f"{LABEL_NODE_KIND}={NODE_KIND_SERVER}, no nvidia.com/gpu")
        if not matches(labels, settings.server_selector):
            return NodeRole("ignored", f"a GPU node ({how}) without the serverSelector"
                                       f" {_kv(settings.server_selector)}")
        return NodeRole("server", how)
    return NodeRole("ignored", _why_not(node, annotations or {}))


def _why_not(node: NodeInfo, annotations: dict[str, str]) -> str:
    labels = node.label_map
    arch = node_arch(node) or "unknown"
    if labels.get(LABEL_NODE_AGENT_OPT_OUT) == NODE_AGENT_DISABLED:
        return f"{arch}; node agents kept off ({LABEL_NODE_AGENT_OPT_OUT}={NODE_AGENT_DISABLED})"
    if arch == "arm64":
        if ANNOTATION_DEVICE_TREE_MODEL in annotations:
            model = annotations[ANNOTATION_DEVICE_TREE_MODEL]
            return (f"arm64, not a Jetson edgetrain knows (devicetree model"
                    f" {model!r})" if model else "arm64 without a device tree: not a Jetson")
        return ("arm64 without edgetrain.io/device-model: the node agent's detect step has not"
                " run there (is the chart installed with agent.enabled?)")
    return (f"{arch}, no nvidia.com/gpu (NVIDIA device plugin) and no"
            f" {LABEL_NODE_KIND}={NODE_KIND_SERVER} label: not a GPU server")


def _kv(selector: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "{}"


def servers(nodes: Sequence[NodeInfo], settings: OperatorSettings) -> list[NodeInfo]:
    """The GPU servers among `nodes`."""
    return [n for n in nodes if node_role(n, settings).kind == "server"]


def image_of(role: ImageRole, settings: OperatorSettings) -> tuple[str, list[str]]:
    """(image, its platforms) of a role."""
    if role == "estimator":
        return settings.estimator_image, list(settings.estimator_platforms)
    return settings.trainer_image, list(settings.trainer_platforms)


def architectures(platforms: Sequence[str]) -> list[str]:
    """The Linux architectures of an image's platforms (linux/arm64/v8 -> arm64)."""
    return sorted({p.split("/")[1] for p in platforms if p.split("/")[0] == "linux"})


def image_refusal(role: ImageRole, node: NodeInfo | None,
                  settings: OperatorSettings) -> str | None:
    """Why the role's image cannot run on `node` (no member for its architecture), or None.
    A node that does not say its architecture is not refused."""
    arch = node_arch(node) if node is not None else None
    image, platforms = image_of(role, settings)
    if node is None or arch is None or arch in architectures(platforms):
        return None
    return (f"the {role} image {image} has no linux/{arch} member (its platforms:"
            f" {', '.join(platforms)}), and node {node.name} is {arch}: publish a linux/{arch}"
            f" member under that tag, or set images.{role} (repository, tag, platforms) to an"
            " image that has one")


def estimator_refusal(nodes: Sequence[NodeInfo], settings: OperatorSettings) -> str | None:
    """Why no GPU server can run the estimator image, or None (also with no server at all:
    then the estimate pod waits and says so)."""
    ready = [n for n in servers(nodes, settings) if n.schedulable]
    runnable = [n for n in ready if image_refusal("estimator", n, settings) is None]
    if not ready or runnable:
        return None
    image, platforms = image_of("estimator", settings)
    seen = ", ".join(f"{n.name} ({node_arch(n)})" for n in ready)
    return (f"the estimator image {image} has a member only for {', '.join(platforms)}, and no"
            f" Ready GPU server has one of those architectures ({seen}): publish a member for"
            " theirs under that tag, or set images.estimator (repository, tag, platforms)")


def estimate_affinity(settings: OperatorSettings) -> Obj:
    """Where an estimate pod may run: not a Jetson or a kwok idle node, and on an
    architecture the estimator image has (the GPU request, or the serverSelector, does the
    rest)."""
    _, platforms = image_of("estimator", settings)
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": LABEL_NODE_KIND, "operator": "NotIn",
             "values": [NODE_KIND_JETSON, NODE_KIND_IDLE]},
            {"key": LABEL_ARCH, "operator": "In", "values": architectures(platforms)},
        ]}]}}}
