"""PowerBudgets without a cluster: the job's side of `decide` (waiting for a share, planning
under it, re-planning when it changes) and the budget's `decide_budget`, as tables."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from edgetrain.api.budget import (
    ANNOTATION_POWER_ALLOCATION,
    LabelSelector,
    PowerBudgetSpec,
    PowerBudgetStatus,
    allocation_annotation,
    parse_allocation,
)
from edgetrain.api.job_status import Phase, PowerShareStatus
from edgetrain.api.keys import ANNOTATION_POWER_LIMIT_WATTS
from edgetrain.operator import decide as dc
from edgetrain.operator import world as wd
from edgetrain.operator.budget import BudgetJob, decide_budget, job_node
from edgetrain.operator.phases import NodeInfo
from edgetrain.planner.budget import JobOptions
from tests.operator.test_decide import (
    CACHE,
    JOB,
    NOW,
    RUNNING,
    SEL,
    SETTINGS,
    SPEC,
    TRAINING,
    node,
    status,
)

SITE = LabelSelector.model_validate({"matchLabels": {"edgetrain.io/device-model":
                                                     "jetson-nano"}})
BUDGETS = {"farm": SITE}


def job_with(watts: float | None, reason: str = "", budget: str = "farm") -> dict[str, Any]:
    return {"metadata": {**JOB["metadata"], "annotations": {
        ANNOTATION_POWER_ALLOCATION: allocation_annotation(budget, watts, reason)}}}


def world(job: dict[str, Any] = JOB, **kw: Any) -> wd.World:
    kw.setdefault("nodes", (node("n1"),))
    kw.setdefault("budgets", BUDGETS)
    kw.setdefault("configmaps", CACHE)
    return wd.World(job=job, now_s=NOW, **kw)


SHARE = PowerShareStatus(budget="farm", node="n1", device_model="jetson-nano")


def test_selecting_on_a_budgeted_node_waits_for_a_share() -> None:
    d = dc.decide(SPEC, status(Phase.selecting, efficiency=TRAINING["efficiency"],
                               profiles=TRAINING["profiles"]), world(), SETTINGS)
    assert d.status.phase is Phase.waiting_for_power
    assert d.status.power_share == SHARE
    assert "PowerBudget farm on n1: not allocated yet" in d.status.message
    assert not any(isinstance(a, wd.Create) for a in d.actions)
    assert not any(c.type == "Planned" for c in d.status.conditions)


def test_off_site_jobs_plan_as_before() -> None:
    d = dc.decide(SPEC, status(Phase.selecting, efficiency=TRAINING["efficiency"],
                               profiles=TRAINING["profiles"]), world(budgets={}), SETTINGS)
    assert d.status.phase is Phase.training and d.status.power_share is None
    assert d.status.selection is not None and d.status.selection.power_limit_watts == 5


def test_waiting_stays_with_the_budget_s_reason() -> None:
    st = status(Phase.waiting_for_power, power_share=SHARE, **TRAINING)
    d = dc.decide(SPEC, st, world(job_with(None, "its cheapest point needs 4.10 W")), SETTINGS)
    assert d.status.phase is Phase.waiting_for_power
    assert d.status.message.endswith("its cheapest point needs 4.10 W")


def test_a_grant_plans_within_it_and_the_pod_carries_it() -> None:
    st = status(Phase.waiting_for_power, power_share=SHARE, efficiency=TRAINING["efficiency"],
                profiles=TRAINING["profiles"])
    w = world(job_with(4.5))
    d = dc.decide(SPEC, st, w, SETTINGS)
    assert d.status.phase is Phase.selecting and d.status.reason == "PowerGranted"
    d = dc.decide(SPEC, d.status, w, SETTINGS)
    sel = d.status.selection
    assert d.status.phase is Phase.training and sel is not None
    assert sel.power_limit_watts == 4.5 and sel.power_watts <= 4.5
    assert sel.batch_size == 64 and sel.gpu_frequency_hz == 384_000_000
    assert d.status.power_share is not None and d.status.power_share.watts == 4.5
    d = dc.decide(SPEC, d.status, w, SETTINGS)
    (create,) = [a for a in d.actions if isinstance(a, wd.Create)]
    annotations = create.body["spec"]["template"]["metadata"]["annotations"]
    assert annotations[ANNOTATION_POWER_LIMIT_WATTS] == "4.5"


def test_own_limit_caps_a_larger_grant() -> None:
    st = status(Phase.selecting, power_share=SHARE, efficiency=TRAINING["efficiency"],
                profiles=TRAINING["profiles"])
    d = dc.decide(SPEC, st, world(job_with(7.0)), SETTINGS)
    assert d.status.selection is not None and d.status.selection.power_limit_watts == 5


def test_a_grant_below_every_point_waits_instead_of_failing() -> None:
    st = status(Phase.selecting, power_share=SHARE, efficiency=TRAINING["efficiency"],
                profiles=TRAINING["profiles"])
    d = dc.decide(SPEC, st, world(job_with(3.0)), SETTINGS)
    assert d.status.phase is Phase.waiting_for_power
    assert "does not fit" in d.status.message and "4.1" in d.status.message


def training_status(grant: float) -> Any:
    return status(Phase.training, training=RUNNING,
                  power_share=PowerShareStatus(budget="farm", node="n1",
                                               device_model="jetson-nano", watts=grant),
                  **{**TRAINING, "selection": SEL.model_copy(update={"power_limit_watts": grant})})


def test_unchanged_grant_keeps_training() -> None:
    d = dc.decide(SPEC, training_status(4.9), world(job_with(4.9), jobs={"j-train-1": {
        "metadata": {"name": "j-train-1"}, "status": {"active": 1}}}), SETTINGS)
    assert d.status.phase is Phase.training
    assert not any(isinstance(a, wd.Delete) for a in d.actions)


def test_a_lowered_grant_replans_through_the_limit_change_path() -> None:
    d = dc.decide(SPEC, training_status(4.9), world(job_with(4.2)), SETTINGS)
    assert d.status.phase is Phase.selecting and d.status.reason == "PowerLimitChanged"
    assert "4.9 W → 4.2 W" in d.status.message
    assert any(isinstance(a, wd.Delete) and a.name == "j-train-1" for a in d.actions)
    assert d.status.training is not None and d.status.training.segment == 1


def test_a_withdrawn_share_stops_and_waits() -> None:
    d = dc.decide(SPEC, training_status(4.9), world(job_with(None, "cap 2 W")), SETTINGS)
    assert d.status.phase is Phase.waiting_for_power and d.status.reason == "PowerWithdrawn"
    assert any(isinstance(a, wd.Delete) and a.name == "j-train-1" for a in d.actions)
    assert "cap 2 W" in d.status.message


def test_a_deleted_budget_returns_the_job_to_its_own_limit() -> None:
    d = dc.decide(SPEC, training_status(4.2), world(job_with(4.2), budgets={}), SETTINGS)
    assert d.status.power_share is None
    assert d.status.phase is Phase.selecting and "4.2 W → 5.0 W" in d.status.message


# --- the budget's side -------------------------------------------------------------------

NANO_W = np.array([2.0, 3.0, 4.0, 5.0])
NANO_S = np.array([300.0, 180.0, 130.0, 110.0])
FARM = PowerBudgetSpec.model_validate({"nodeSelector": {"matchLabels": {"site": "farm"}},
                                       "capWatts": 9})


def site_node(name: str, site: str = "farm") -> NodeInfo:
    return NodeInfo(name, (("edgetrain.io/device-model", "jetson-nano"), ("site", site)), True)


NODES = (site_node("n1"), site_node("n2"), site_node("n3"), site_node("x1", "barn"))
IDLE = {"n1": 1.0, "n2": 1.0, "n3": 1.0, "x1": 1.0}


def bjob(name: str, node_name: str, grant: float | None = None, *,
         phase: Phase = Phase.waiting_for_power, running: tuple[float, float] | None = None,
         created: str = "") -> BudgetJob:
    return BudgetJob(
        namespace="ns", name=name, phase=phase, node=node_name, own_limit_w=5.0,
        created=created or f"2026-01-01T00:00:0{name[-1]}Z",
        annotation=None if grant is None else allocation_annotation("farm", grant,
                                                                    node=node_name),
        running_limit_w=None if running is None else running[0],
        running_power_w=None if running is None else running[1],
        options=JobOptions("x", NANO_W, NANO_S, labels=((64, 1), (64, 2), (64, 3), (64, 4))))


def budget(jobs: list[BudgetJob], spec: PowerBudgetSpec = FARM,
           others: dict[str, LabelSelector] | None = None) -> Any:
    return decide_budget("farm", spec, PowerBudgetStatus(), generation=1,
                         seconds_of_day=0.0, nodes=NODES, node_idle_w=IDLE,
                         others=others or {"farm": FARM.node_selector}, jobs=jobs)


def grants(d: Any) -> dict[str, float | None]:
    return {w.name: (parse_allocation(w.text) or ("", None, ""))[1] for w in d.writes}


def test_three_waiting_jobs_share_nine_watts() -> None:
    d = budget([bjob("a1", "n1"), bjob("a2", "n2"), bjob("a3", "n3")])
    assert grants(d) == {"a1": 3.0, "a2": 3.0, "a3": 3.0}
    assert d.status.planned_watts == 9.0 and d.status.jobs == 3 and d.status.waiting == 0
    assert d.status.nodes == ["n1", "n2", "n3"]  # x1 is another site's
    assert [a.batch_size for a in d.status.allocations] == [64, 64, 64]
    assert d.events[0][1] == "Allocated"


def test_a_job_that_does_not_fit_waits_with_the_numbers() -> None:
    jobs = [bjob("a1", "n1", 3.0, phase=Phase.training, running=(3.0, 2.9)),
            bjob("a2", "n2", 3.0, phase=Phase.training, running=(3.0, 2.9)),
            bjob("a3", "n3")]
    d = budget(jobs, FARM.model_copy(update={"cap_watts": 5.5}))
    (write,) = [w for w in d.writes if w.name == "a3"]
    share = parse_allocation(write.text)
    assert share is not None and share[1] is None and "needs 2.00 W" in share[2]
    assert d.status.waiting == 1


def test_one_job_per_node_the_fourth_waits_for_a_node() -> None:
    running = [bjob(f"a{i}", f"n{i}", 2.0, phase=Phase.training, running=(2.0, 2.0))
               for i in (1, 2, 3)]
    d = budget([*running, bjob("a4", "n3")])
    (write,) = [w for w in d.writes if w.name == "a4"]
    share = parse_allocation(write.text)
    assert write.name == "a4" and share is not None and share[1] is None
    assert "every node of its device model on the site runs a job" in share[2]


def test_waiting_jobs_asking_on_one_node_are_spread() -> None:
    d = budget([bjob("a1", "n1"), bjob("a2", "n1"), bjob("a3", "n1")])
    nodes = {w.name: json.loads(w.text)["node"] for w in d.writes}
    assert nodes == {"a1": "n1", "a2": "n2", "a3": "n3"}
    assert d.status.planned_watts == 9.0


def test_a_lowered_cap_lowers_first_and_reports_the_running_draw() -> None:
    jobs = [bjob(f"a{i}", f"n{i}", 3.0, phase=Phase.training, running=(3.0, 2.9))
            for i in (1, 2, 3)]
    low = FARM.model_copy(update={"cap_watts": 6.0})
    d = budget(jobs, low)
    assert grants(d) == {"a1": 2.0, "a2": 2.0, "a3": 2.0}
    # The running plans (2.9 W each) were made for 3 W: they count until they re-plan.
    assert d.status.planned_watts == pytest.approx(8.7)


def test_raises_wait_until_every_job_runs_within_its_grant() -> None:
    # a1 was lowered to 2 W but still runs its 4.9 W plan; a freed node's job may not start.
    jobs = [bjob("a1", "n1", 2.0, phase=Phase.training, running=(5.0, 4.9)),
            bjob("a2", "n2", 2.0, phase=Phase.training, running=(2.0, 2.0)),
            bjob("a3", "n3")]
    d = budget(jobs)
    assert "a3" not in grants(d) or grants(d)["a3"] is None
    assert "re-plan" in d.status.message
    # Once a1 re-planned, a3 starts and the others get more (one raising stage).
    jobs[0] = bjob("a1", "n1", 2.0, phase=Phase.training, running=(2.0, 2.0))
    d = budget(jobs)
    assert grants(d) == {"a1": 3.0, "a2": 3.0, "a3": 3.0}


def test_finished_jobs_free_their_share() -> None:
    jobs = [bjob("a1", "n1", 4.0, phase=Phase.succeeded),
            bjob("a2", "n2", 4.0, phase=Phase.training, running=(4.0, 4.0))]
    d = budget(jobs)
    assert grants(d) == {"a2": 5.0}
    assert d.status.planned_watts == 7.0  # a2's 5 W and two idle nodes


def test_overlapping_budgets_plan_nothing_new() -> None:
    others = {"farm": FARM.node_selector, "barn": LabelSelector.model_validate(
        {"matchLabels": {"edgetrain.io/device-model": "jetson-nano"}})}
    d = budget([bjob("a1", "n1", 3.0, phase=Phase.training, running=(3.0, 3.0)),
                bjob("a2", "n2")], others=others)
    assert [w.name for w in d.writes] == ["a2"]
    share = parse_allocation(d.writes[0].text)
    assert share is not None and share[1] is None and "also under PowerBudget barn" in share[2]
    (cond,) = d.status.conditions
    assert (cond.status, cond.reason) == ("False", "OverlappingBudgets")
    assert ("Warning", "OverlappingBudgets") in [(k, r) for k, r, _ in d.events]


def test_cap_below_idle_is_marked() -> None:
    low = FARM.model_copy(update={"cap_watts": 2.5})
    d = budget([bjob("a1", "n1")], low)
    assert d.status.conditions[0].reason == "CapBelowIdle"
    assert "below the idle draw" in d.status.message and "3.00 W" in d.status.message


def test_schedule_step_sets_the_cap() -> None:
    solar = PowerBudgetSpec.model_validate({
        "nodeSelector": {"matchLabels": {"site": "farm"}}, "capWatts": 9,
        "schedule": [{"timeOfDay": "00:00", "watts": 5}, {"timeOfDay": "12:00", "watts": 9}]})
    d = budget([bjob("a1", "n1"), bjob("a2", "n2")], solar)
    assert d.status.cap_watts == 5 and sum(v or 0 for v in grants(d).values()) <= 5 - 1.0
    assert math.isclose(d.status.planned_watts or 0, 5.0)


def test_a_job_draws_where_it_trains_else_where_granted() -> None:
    granted = allocation_annotation("farm", 3.0, node="n2")
    assert job_node("farm", "n1", granted, "n3") == "n3"
    assert job_node("farm", "n1", granted, None) == "n2"
    assert job_node("barn", "n1", granted, None) == "n1"  # another budget's grant
    assert job_node("farm", "n1", allocation_annotation("farm", None, "x"), None) == "n1"


def test_an_equally_good_split_does_not_restart_anyone() -> None:
    # A 4/3/2 W split (130 + 180 + 300 = 610 s) is worse than 3/3/3 (540 s): re-plan, the
    # lowering first.
    jobs = [bjob("a1", "n1", 4.0, phase=Phase.training, running=(4.0, 4.0)),
            bjob("a2", "n2", 3.0, phase=Phase.training, running=(3.0, 3.0)),
            bjob("a3", "n3", 2.0, phase=Phase.training, running=(2.0, 2.0))]
    assert grants(budget(jobs)) == {"a1": 3.0}
    # Within 2 % of the best: the running jobs keep their grants.
    close = [bjob("a1", "n1", 3.0, phase=Phase.training, running=(3.0, 3.0)),
             bjob("a2", "n2", 3.0, phase=Phase.training, running=(3.0, 3.0)),
             bjob("a3", "n3", 3.0, phase=Phase.training, running=(3.0, 3.0))]
    assert budget(close, FARM.model_copy(update={"cap_watts": 9.04})).writes == []
