"""`decide.records_only` as a table: which training decisions may rest on the watches' view
(they only record progress) and which must be taken again on fresh reads (they act)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from edgetrain.api.job_status import Condition, Phase, PowerAwareTrainingJobStatus
from edgetrain.operator import decide as dc
from edgetrain.operator import world as wd
from tests.operator.test_decide import (
    PROGRESS_CM,
    PROGRESS_KEY,
    RESULT_KEY,
    RUNNING,
    SETTINGS,
    SPEC,
    TRAINING,
    job,
    node,
    pod,
    progress,
    status,
    unschedulable_pod,
    world,
)

TRAINING_NOW = status(Phase.training, training=RUNNING, **TRAINING)
NODE = (node("n1"),)
ANNOTATED = {"edgetrain.io/training-samples": "512", "edgetrain.io/training-accuracy": "0.5000"}
BLOCKED_BEFORE = TRAINING_NOW.model_copy(deep=True, update={"conditions": [Condition(
    type=dc.BLOCKED, status="True", reason="Unschedulable", message="no node",
    last_transition_time="2026-11-25T00:00:00Z")]})


def annotated(p: dict[str, object]) -> dict[str, object]:
    meta = dict(p["metadata"])  # type: ignore[arg-type]
    return {**p, "metadata": {**meta, "annotations": ANNOTATED}}


@dataclass
class Row:
    name: str
    status: PowerAwareTrainingJobStatus
    world: wd.World
    records_only: bool


ROWS = [
    Row("running, nothing new", TRAINING_NOW,
        world(nodes=NODE, jobs={"j-train-1": job("running")}, pods=(pod("j-train-1"),)), True),
    Row("running, progress to the status and the pod's annotations", TRAINING_NOW,
        world(nodes=NODE, jobs={"j-train-1": job("running")}, pods=(pod("j-train-1"),),
              configmaps={PROGRESS_CM: progress(512, 0.5)}), True),
    Row("running, progress already on the pod", TRAINING_NOW,
        world(nodes=NODE, jobs={"j-train-1": job("running")},
              pods=(annotated(pod("j-train-1")),),
              configmaps={PROGRESS_CM: progress(512, 0.5)}), True),
    Row("the Job succeeded: the job ends", TRAINING_NOW,
        world(nodes=NODE, jobs={"j-train-1": job("succeeded")},
              configmaps={PROGRESS_CM: {RESULT_KEY: progress(4096, 0.9)[PROGRESS_KEY]}}), False),
    Row("the Job succeeded, its result not seen yet", TRAINING_NOW,
        world(nodes=NODE, jobs={"j-train-1": job("succeeded")}), False),
    Row("the Job failed: retried", TRAINING_NOW,
        world(nodes=NODE, jobs={"j-train-1": job("failed")}, pods=(pod("j-train-1", 1),)),
        False),
    Row("the Job looks missing: started again", TRAINING_NOW, world(nodes=NODE), False),
    Row("its pod looks unschedulable: a Warning and a condition", TRAINING_NOW,
        world(nodes=NODE, jobs={"j-train-1": job("running")},
              pods=(unschedulable_pod("j-train-1", "2026-11-25T00:00:00Z"),)), False),
    Row("its pod looks queued for resources: the message changes", TRAINING_NOW,
        world(nodes=NODE, jobs={"j-train-1": job("running")},
              pods=(unschedulable_pod("j-train-1", "2026-11-25T00:00:00Z",
                                      "0/3 nodes are available: 3 Insufficient cpu"),)),
        False),
    Row("its pod runs again after being blocked: the condition clears", BLOCKED_BEFORE,
        world(nodes=NODE, jobs={"j-train-1": job("running")}, pods=(pod("j-train-1"),)), False),
    Row("its node is gone: re-planned", TRAINING_NOW, world(), False),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_records_only(row: Row) -> None:
    decision = dc.decide(SPEC, row.status, row.world, SETTINGS)
    assert dc.records_only(row.status, decision) is row.records_only, (
        decision.status.phase, decision.actions, decision.status.message)


def test_an_event_alone_is_more_than_a_record() -> None:
    decision = wd.Decision(TRAINING_NOW.model_copy(deep=True),
                           [wd.PostEvent("Warning", "Something", "happened")])
    assert not dc.records_only(TRAINING_NOW, decision)
