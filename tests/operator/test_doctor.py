"""`edgetrain doctor`'s verdict from objects as the API server returns them: a clean fleet has
no problem, and each thing a fleet can lack is one line that says what to do."""

from __future__ import annotations

from typing import Any

import pytest

from edgetrain.operator.doctor import diagnose, render

Obj = dict[str, Any]


def node(name: str, arch: str, gpus: int = 0, ready: bool = True,
         annotations: dict[str, str] | None = None, **labels: str) -> Obj:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/arch": arch, **labels},
                         "annotations": annotations or {}},
            "spec": {} if ready else {"unschedulable": True},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)} if gpus else {},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


NANO = node("nano-0", "arm64", **{"edgetrain.io/node-kind": "jetson",
                                  "edgetrain.io/device-model": "jetson-nano",
                                  "edgetrain.io/l4t": "32.7.1"})
SERVER = node("gpu-0", "amd64", gpus=2)


def operator(**env: str) -> Obj:
    values = {"EDGETRAIN_OPERATOR_NAMESPACES": "jobs",
              "EDGETRAIN_OPERATOR_CHECKPOINT_PVC": "edgetrain-checkpoints", **env}
    return {"metadata": {"name": "edgetrain-operator", "namespace": "edgetrain"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{
                "name": "operator",
                "env": [{"name": k, "value": v} for k, v in values.items()]
                + [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]}]}}},
            "status": {"availableReplicas": 1}}


CLAIM = {"spec": {"accessModes": ["ReadWriteMany"]}, "status": {"phase": "Bound"}}


def run(nodes: list[Obj], deployments: list[Obj] | None = None,
        accounts: dict[str, bool] | None = None, claims: dict[str, Obj | None] | None = None,
        runtimes: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    report = diagnose(nodes, [operator()] if deployments is None else deployments,
                      {"jobs": True} if accounts is None else accounts,
                      {"jobs": CLAIM} if claims is None else claims, list(runtimes))
    return report.problems, render(report)


def test_a_clean_fleet_has_no_problem() -> None:
    pi = node("pi-0", "arm64", annotations={"edgetrain.io/device-tree-model": "Raspberry Pi 4"})
    problems, lines = run([NANO, SERVER, pi])
    assert problems == [], problems
    text = "\n".join(lines)
    assert lines[-1] == "no problems found"
    assert "operator settings: edgetrain/edgetrain-operator" in text
    # Each node as the operator sees it, and why.
    rows = {line.split()[0]: line for line in lines if line.startswith("  ")}
    assert "jetson" in rows["nano-0"] and "jetson-nano, L4T 32.7.1" in rows["nano-0"]
    assert "server" in rows["gpu-0"] and "nvidia.com/gpu: 2" in rows["gpu-0"]
    assert "ignored" in rows["pi-0"] and "Raspberry Pi 4" in rows["pi-0"]
    # The images each phase runs, and the worker namespaces with their claim.
    assert "estimator:" in rows["estimate"] and "linux/amd64" in rows["estimate"]
    assert "trainer:" in rows["train"] and "linux/arm64" in rows["profile"]
    assert "Bound, ReadWriteMany" in rows["jobs"]


@pytest.mark.parametrize(("case", "problem"), [
    ("bare arm64", "node bare-0: arm64 without edgetrain.io/device-model"),
    ("detected only", "node d-0: jetson-orin-nano without edgetrain.io/node-kind=jetson"),
    ("no jetson", "no node is a Jetson"),
    ("no server", "no GPU server"),
    ("arm64 servers", "the estimator image"),
    ("no operator", "no edgetrain operator Deployment"),
    ("operator down", "has no available replica"),
    ("no worker sa", "namespace jobs is watched but has no ServiceAccount edgetrain-worker"),
    ("no claim", "namespace jobs: no PersistentVolumeClaim edgetrain-checkpoints"),
    ("rwo claim", "not ReadWriteMany"),
    ("pending claim", "claim edgetrain-checkpoints is Pending, not Bound"),
    ("no pvc setting", "operator.settings.checkpointPvc is empty"),
    ("runtime class", "RuntimeClass nvidia (operator.settings.jetsonRuntimeClass) does not"),
    ("amd64 trainer", "the trainer image"),
])
def test_each_problem_is_one_line(case: str, problem: str) -> None:
    nodes, deployments, accounts, claims = [NANO, SERVER], None, None, None
    if case == "bare arm64":
        nodes = [*nodes, node("bare-0", "arm64")]
    elif case == "detected only":
        nodes = [*nodes, node("d-0", "arm64", **{"edgetrain.io/device-model":
                                                  "jetson-orin-nano"})]
    elif case == "no jetson":
        nodes = [SERVER]
    elif case == "no server":
        nodes = [NANO]
    elif case == "arm64 servers":
        nodes = [NANO, node("grace-0", "arm64", gpus=4, **{"edgetrain.io/node-kind": "server"})]
    elif case == "no operator":
        deployments = []
    elif case == "operator down":
        down = operator()
        down["status"] = {}
        deployments = [down]
    elif case == "no worker sa":
        accounts = {}
    elif case == "no claim":
        claims = {"jobs": None}
    elif case == "rwo claim":
        claims = {"jobs": {"spec": {"accessModes": ["ReadWriteOnce"]},
                           "status": {"phase": "Bound"}}}
    elif case == "pending claim":
        claims = {"jobs": {"spec": {"accessModes": ["ReadWriteMany"]}, "status": {}}}
    elif case == "no pvc setting":
        deployments = [operator(EDGETRAIN_OPERATOR_CHECKPOINT_PVC="")]
    elif case == "runtime class":
        deployments = [operator(EDGETRAIN_OPERATOR_JETSON_RUNTIME_CLASS="nvidia")]
    elif case == "amd64 trainer":
        deployments = [operator(EDGETRAIN_OPERATOR_TRAINER_PLATFORMS="linux/amd64")]
    problems, lines = run(nodes, deployments, accounts, claims)
    assert any(p.startswith(problem) or problem in p for p in problems), problems
    assert all("\n" not in p for p in problems)
    assert f"problem: {problems[0]}" in lines


def test_an_opted_out_or_runtime_class_that_exists_is_no_problem() -> None:
    opted = node("arm-server", "arm64", **{"edgetrain.io/node-agent": "disabled"})
    problems, lines = run([NANO, SERVER, opted], [operator(
        EDGETRAIN_OPERATOR_JETSON_RUNTIME_CLASS="nvidia")], runtimes=("nvidia",))
    assert problems == [], problems
    assert any("kept off" in line for line in lines)
