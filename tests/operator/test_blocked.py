"""A worker that cannot start says why: `worker_blocked` as a table (admission, quota, no node,
image), and `decide` putting the reason in status, a condition and one Warning Event, then
failing the job after spec.workerStartDeadlineSeconds."""

from __future__ import annotations

from typing import Any

import pytest

from edgetrain.api.job_status import Phase
from edgetrain.operator import decide as dc
from edgetrain.operator.blocked import worker_blocked
from tests.operator.test_decide import (
    EFF,
    RUNNING,
    SETTINGS,
    SPEC,
    TRAINING,
    kinds,
    node,
    pod,
    status,
    unschedulable_pod,
    world,
)

CREATED = "1970-01-12T13:46:30Z"  # NOW - 10 s
PSA = ('Error creating: pods "j-estimate-0-x" is forbidden: violates PodSecurity'
       ' "restricted:latest": allowPrivilegeEscalation != false (container "estimate" must set'
       ' securityContext.allowPrivilegeEscalation=false)')
QUOTA = ('Error creating: pods "j-estimate-0-x" is forbidden: exceeded quota: small,'
         ' requested: pods=1, used: pods=1, limited: pods=1')


def workload(name: str = "j-estimate-0", created: str = CREATED) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": "u1", "creationTimestamp": created},
            "status": {}}


def refused(message: str, when: str = CREATED) -> dict[str, Any]:
    return {"type": "Warning", "reason": "FailedCreate", "message": message,
            "lastTimestamp": when}


def image_pod(name: str, reason: str = "ImagePullBackOff") -> dict[str, Any]:
    return {"metadata": {"name": f"{name}-pod", "creationTimestamp": CREATED,
                         "labels": {"job-name": name}},
            "status": {"phase": "Pending", "containerStatuses": [{
                "image": "registry.invalid/edgetrain:none",
                "state": {"waiting": {"reason": reason,
                                      "message": 'Back-off pulling image "x"'}}}]}}


@pytest.mark.parametrize(("pods", "events", "cause", "text"), [
    ((), (refused(PSA),), "PodSecurity", "allowPrivilegeEscalation"),
    ((), (refused(QUOTA),), "QuotaExceeded", "exceeded quota"),
    ((), (refused("Error creating: admission webhook \"x\" denied the request"),),
     "AdmissionRefused", "webhook"),
    ((unschedulable_pod("j-estimate-0", CREATED),), (), "Unschedulable", "node affinity"),
    ((unschedulable_pod("j-estimate-0", CREATED, "0/2 nodes are available: 2 Insufficient"
                        " nvidia.com/gpu"),), (), "WaitingForResources", "waits for resources"),
    ((image_pod("j-estimate-0"),), (), "ImagePull", "registry.invalid"),
    ((image_pod("j-estimate-0", "InvalidImageName"),), (), "ImagePull", "InvalidImageName"),
    ((image_pod("j-estimate-0", "CreateContainerConfigError"),), (), "ContainerConfig",
     "CreateContainerConfigError"),
], ids=["pod security", "quota", "webhook", "no node", "busy GPU", "image pull",
        "invalid image", "container config"])
def test_causes(pods: tuple[Any, ...], events: tuple[Any, ...], cause: str, text: str) -> None:
    got = worker_blocked(workload(), list(pods), events)
    assert got is not None and got.cause == cause
    assert text in got.message("estimate job j-estimate-0")


def test_nothing_blocks_a_running_or_just_created_worker() -> None:
    assert worker_blocked(workload(), [pod("j-estimate-0")], [refused(PSA)]) is None
    assert worker_blocked(workload(), [], []) is None
    # A refusal from before this Job was created (a former Job of the same name) is not its own.
    assert worker_blocked(workload(), [], [refused(PSA, "1970-01-12T13:40:00Z")]) is None


def estimating(**kw: Any) -> Any:
    return world(jobs={"j-estimate-0": {**workload(), "status": {"active": 0}}}, **kw)


def test_a_refused_estimate_says_why_once() -> None:
    events = {"j-estimate-0": (refused(PSA),)}
    first = dc.decide(SPEC, status(Phase.estimating, efficiency=EFF),
                      estimating(worker_events=events), SETTINGS)
    assert first.status.phase is Phase.estimating
    assert kinds(first) == ["event PodSecurity"]
    assert "violates PodSecurity" in first.status.message
    assert "fails after 600 s" in first.status.message
    cond = {c.type: c for c in first.status.conditions}["WorkerBlocked"]
    assert (cond.status, cond.reason) == ("True", "PodSecurity")
    again = dc.decide(SPEC, first.status, estimating(worker_events=events), SETTINGS)
    assert kinds(again) == [], "the Event is posted when the cause appears, not every poll"
    admitted = dc.decide(SPEC, again.status, estimating(pods=(pod("j-estimate-0"),)), SETTINGS)
    cond = {c.type: c for c in admitted.status.conditions}["WorkerBlocked"]
    assert cond.status == "False" and "admitted" in admitted.status.message


def test_the_deadline_fails_the_job_with_the_reason() -> None:
    spec = SPEC.model_copy(update={"worker_start_deadline_seconds": 5})
    got = dc.decide(spec, status(Phase.estimating, efficiency=EFF),
                    estimating(worker_events={"j-estimate-0": (refused(QUOTA),)}), SETTINGS)
    assert got.status.phase is Phase.failed and got.status.reason == "QuotaExceeded"
    assert "exceeded quota" in got.status.message
    assert "workerStartDeadlineSeconds is 5 s" in got.status.message
    # The refused Job goes: its controller would start a pod once the quota allows it.
    assert "delete jobs j-estimate-0" in kinds(got)
    # Within the deadline it waits (the operator's grace applies when the spec sets none).
    spec = SPEC.model_copy(update={"worker_start_deadline_seconds": 60})
    got = dc.decide(spec, status(Phase.estimating, efficiency=EFF),
                    estimating(worker_events={"j-estimate-0": (refused(QUOTA),)}), SETTINGS)
    assert got.status.phase is Phase.estimating and "fails after 60 s" in got.status.message


def test_a_training_pod_without_its_image_says_why() -> None:
    got = dc.decide(SPEC, status(Phase.training, training=RUNNING, **TRAINING),
                    world(nodes=(node("n1"),), jobs={"j-train-1": {"status": {"active": 1}}},
                          pods=(image_pod("j-train-1"),)), SETTINGS)
    assert got.status.phase is Phase.training
    assert kinds(got) == ["event ImagePull"]
    assert "registry.invalid" in got.status.message
