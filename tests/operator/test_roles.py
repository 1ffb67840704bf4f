"""Nodes as the operator sees them (Jetson, GPU server, ignored and why), and the refusal of an
image with no member for a node's architecture: pure functions, then `decide` with them."""

from __future__ import annotations

import pytest

from edgetrain.api.job_status import Phase, PowerAwareTrainingJobStatus
from edgetrain.operator import decide as dc
from edgetrain.operator import roles
from edgetrain.operator import world as wd
from edgetrain.operator.phases import NodeInfo
from edgetrain.operator.settings import OperatorSettings, load_settings
from tests.operator.test_decide import EFF, PROF, SEL, SPEC, TRAINING, world

DEFAULTS = load_settings({})


def info(name: str, gpus: int = 0, ready: bool = True, **labels: str) -> NodeInfo:
    return NodeInfo(name, tuple(sorted(labels.items())), ready, gpus)


ARM = {"kubernetes.io/arch": "arm64"}
AMD = {"kubernetes.io/arch": "amd64"}
JETSON = {**ARM, "edgetrain.io/node-kind": "jetson", "edgetrain.io/device-model": "jetson-nano",
          "edgetrain.io/l4t": "32.7.1"}


@pytest.mark.parametrize(("node", "kind", "why"), [
    (info("j", **JETSON), "jetson", "jetson-nano, L4T 32.7.1"),
    # The NVIDIA device plugin's capacity makes a server; no label is needed.
    (info("s", gpus=4, **AMD), "server", "nvidia.com/gpu: 4"),
    (info("s", **AMD, **{"edgetrain.io/node-kind": "server"}), "server",
     "edgetrain.io/node-kind=server, no nvidia.com/gpu"),
    # A bare node: only what the kubelet sets.
    (info("b", **ARM), "ignored", "detect step has not run"),
    (info("b", **AMD), "ignored", "no nvidia.com/gpu"),
    # Detected (device-model) but its board agent has not labelled it: not a server either,
    # though a Jetson's device plugin may advertise nvidia.com/gpu.
    (info("d", gpus=1, **ARM, **{"edgetrain.io/device-model": "jetson-orin-nano"}), "ignored",
     "board's node agent has not labelled it"),
    # A bare Jetson whose device plugin runs: arm64 GPU servers need the label.
    (info("g", gpus=1, **ARM), "ignored", "needs the label edgetrain.io/node-kind=server"),
    (info("g", gpus=4, **ARM, **{"edgetrain.io/node-kind": "server"}), "server",
     "nvidia.com/gpu: 4"),
    (info("k", **{"edgetrain.io/node-kind": "idle"}), "ignored", "kwok idle"),
    (info("o", **ARM, **{"edgetrain.io/node-agent": "disabled"}), "ignored", "kept off"),
    (info("x", **ARM, **{"edgetrain.io/node-kind": "jetson"}), "ignored",
     "no edgetrain.io/device-model"),
])
def test_node_roles(node: NodeInfo, kind: str, why: str) -> None:
    role = roles.node_role(node, DEFAULTS)
    assert (role.kind, why in role.why) == (kind, True), role


def test_the_detect_step_says_why_an_arm64_node_is_not_a_jetson() -> None:
    bare = info("pi", **ARM)
    said = roles.node_role(bare, DEFAULTS, {"edgetrain.io/device-tree-model":
                                            "Raspberry Pi 4 Model B Rev 1.4"})
    assert said.kind == "ignored" and "Raspberry Pi 4" in said.why
    none = roles.node_role(bare, DEFAULTS, {"edgetrain.io/device-tree-model": ""})
    assert "without a device tree" in none.why


def test_the_server_selector_narrows_the_gpu_nodes() -> None:
    settings = load_settings({"EDGETRAIN_OPERATOR_SERVER_SELECTOR": "pool=train"})
    assert roles.node_role(info("s", gpus=2, **AMD), settings).kind == "ignored"
    assert roles.node_role(info("s", gpus=2, pool="train", **AMD), settings).kind == "server"
    nodes = [info("s0", gpus=2, pool="train", **AMD), info("s1", gpus=2, **AMD),
             info("j", **JETSON)]
    assert [n.name for n in roles.servers(nodes, settings)] == ["s0"]


def test_an_image_without_the_nodes_architecture_is_refused() -> None:
    assert roles.image_refusal("trainer", info("j", **JETSON), DEFAULTS) is None
    amd_jetson = info("j", **{**JETSON, "kubernetes.io/arch": "amd64"})
    refusal = roles.image_refusal("trainer", amd_jetson, DEFAULTS)
    assert refusal is not None
    assert "trainer image" in refusal and "no linux/amd64 member" in refusal
    assert "linux/arm64" in refusal and "images.trainer" in refusal
    # A multi-arch list runs on both; a node that does not say its architecture is let through.
    both = load_settings({"EDGETRAIN_OPERATOR_TRAINER_PLATFORMS": "linux/arm64,linux/amd64"})
    assert roles.image_refusal("trainer", amd_jetson, both) is None
    assert roles.image_refusal("trainer", info("n"), DEFAULTS) is None


def test_the_estimator_is_refused_only_when_no_ready_server_can_run_it() -> None:
    arm_server = info("grace", gpus=4, **ARM, **{"edgetrain.io/node-kind": "server"})
    amd_server = info("x86", gpus=4, **AMD)
    assert roles.estimator_refusal([], DEFAULTS) is None  # no server: the pod waits, saying so
    assert roles.estimator_refusal([arm_server, amd_server], DEFAULTS) is None
    refusal = roles.estimator_refusal([arm_server], DEFAULTS)
    assert refusal is not None and "grace (arm64)" in refusal and "linux/amd64" in refusal
    # A server that is not Ready does not count either way.
    assert roles.estimator_refusal([arm_server, info("x86", 4, False, **AMD)],
                                   DEFAULTS) is not None


def test_estimate_affinity_keeps_jetsons_and_foreign_architectures_out() -> None:
    aff = roles.estimate_affinity(load_settings(
        {"EDGETRAIN_OPERATOR_ESTIMATOR_PLATFORMS": "linux/amd64,linux/arm64/v8"}))
    (term,) = aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert {"key": "kubernetes.io/arch", "operator": "In",
            "values": ["amd64", "arm64"]} in term["matchExpressions"]


SETTINGS = OperatorSettings(retry_limit=2, retry_backoff_s=10)


def _refused(d: wd.Decision) -> str:
    assert (d.status.phase, d.status.reason) == (Phase.failed, "NoImageForArchitecture"), d
    assert [a.reason for a in d.actions if isinstance(a, wd.PostEvent)] == [
        "NoImageForArchitecture"], d.actions
    assert not [a for a in d.actions if isinstance(a, wd.Create)], d.actions
    return d.status.message


def test_decide_refuses_an_estimate_no_server_can_run() -> None:
    before = PowerAwareTrainingJobStatus(phase=Phase.estimating)
    grace = info("grace", gpus=4, **ARM, **{"edgetrain.io/node-kind": "server"})
    arm = world(servers=(grace,))
    message = _refused(dc.decide(SPEC, before, arm, SETTINGS))
    assert "estimator image" in message and "grace (arm64)" in message
    # With an amd64 server the Job is made, with the estimator image.
    amd = world(servers=(grace, info("x86", gpus=4, **AMD)))
    made = dc.decide(SPEC, before, amd, SETTINGS)
    (job,) = [a for a in made.actions if isinstance(a, wd.Create) and a.plural == "jobs"]
    assert job.body["spec"]["template"]["spec"]["containers"][0]["image"] == \
        SETTINGS.estimator_image


def test_decide_refuses_profiling_and_training_on_a_node_the_trainer_cannot_run_on() -> None:
    amd_nano = info("n1", **{**JETSON, "kubernetes.io/arch": "amd64",
                             "edgetrain.io/l4t": "36.4"})
    profiling = PowerAwareTrainingJobStatus(phase=Phase.profiling, efficiency=EFF)
    assert "no linux/amd64 member" in _refused(
        dc.decide(SPEC, profiling, world(nodes=(amd_nano,)), SETTINGS))
    training = PowerAwareTrainingJobStatus(phase=Phase.training, **TRAINING)
    assert SEL.node == PROF.node == "n1"
    assert "node n1 is amd64" in _refused(
        dc.decide(SPEC, training, world(nodes=(amd_nano,)), SETTINGS))
    # The same node as arm64 trains, with the trainer image.
    arm_nano = info("n1", **{**JETSON, "edgetrain.io/l4t": "36.4"})
    made = dc.decide(SPEC, training, world(nodes=(arm_nano,)), SETTINGS)
    (job,) = [a for a in made.actions if isinstance(a, wd.Create) and a.plural == "jobs"]
    assert job.body["spec"]["template"]["spec"]["containers"][0]["image"] == \
        SETTINGS.trainer_image


@pytest.mark.parametrize("kind", ["jetson", "idle"])
@pytest.mark.parametrize("gpus", [0, 4])
@pytest.mark.parametrize("arch", [ARM, AMD])
def test_what_the_server_list_leaves_out_is_never_a_server(kind: str, gpus: int,
                                                          arch: dict[str, str]) -> None:
    """The servers are listed without node-kind jetson or idle (the whole fleet otherwise):
    node_role never takes such a node as a server."""
    from edgetrain.operator.gather import server_list_selector
    settings = load_settings({"EDGETRAIN_OPERATOR_SERVER_SELECTOR": "pool=train"})
    assert server_list_selector(settings) == (
        "pool=train,edgetrain.io/node-kind!=jetson,edgetrain.io/node-kind!=idle")
    node = info("n", gpus=gpus, pool="train", **arch, **{
        "edgetrain.io/node-kind": kind, "edgetrain.io/device-model": "jetson-nano"})
    bare = info("m", gpus=gpus, pool="train", **arch, **{"edgetrain.io/node-kind": kind})
    assert roles.node_role(node, settings).kind != "server"
    assert roles.node_role(bare, settings).kind != "server"
