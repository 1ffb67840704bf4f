"""PowerBudgets without a cluster: the job's side of `decide` (waiting for a share, planning
under it, re-planning when it changes) and the budget's `decide_budget`, as tables."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import numpy as np

from edgetrain.api.budget import (
    ANNOTATION_POWER_ALLOCATION,
    BudgetAllocationStatus,
    GrantNotice,
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
from edgetrain.operator.grants import PodLimit, Rules
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


def job_with(watts: float | None, reason: str = "", budget: str = "farm", seq: int = 1,
             purpose: str = "train") -> dict[str, Any]:
    return {"metadata": {**JOB["metadata"], "annotations": {
        ANNOTATION_POWER_ALLOCATION: allocation_annotation(
            budget, watts, reason, node="n1" if watts is not None else "", sequence=seq,
            purpose="profile" if purpose == "profile" else "train")}}}


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
    (create,) = [a for a in d.actions if isinstance(a, wd.Create) and a.plural == "jobs"]
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


def training_status(grant: float, seq: int = 1) -> Any:
    return status(Phase.training, training=RUNNING,
                  power_share=PowerShareStatus(budget="farm", node="n1",
                                               device_model="jetson-nano", watts=grant,
                                               sequence=seq),
                  **{**TRAINING, "selection": SEL.model_copy(update={"power_limit_watts": grant})})


def test_unchanged_grant_keeps_training() -> None:
    d = dc.decide(SPEC, training_status(4.9), world(job_with(4.9), jobs={"j-train-1": {
        "metadata": {"name": "j-train-1"}, "status": {"active": 1}}}), SETTINGS)
    assert d.status.phase is Phase.training
    assert not any(isinstance(a, wd.Delete) for a in d.actions)


def test_a_new_grant_of_the_same_watts_is_echoed_without_a_restart() -> None:
    d = dc.decide(SPEC, training_status(4.9), world(job_with(4.9, seq=7), jobs={"j-train-1": {
        "metadata": {"name": "j-train-1"}, "status": {"active": 1}}}), SETTINGS)
    assert d.status.phase is Phase.training
    assert d.status.power_share is not None and d.status.power_share.sequence == 7
    assert not any(isinstance(a, wd.Delete) for a in d.actions)


def test_a_lowered_grant_replans_through_the_limit_change_path() -> None:
    d = dc.decide(SPEC, training_status(4.9), world(job_with(4.2, seq=2)), SETTINGS)
    assert d.status.phase is Phase.selecting and d.status.reason == "PowerLimitChanged"
    assert "4.9 W → 4.2 W" in d.status.message
    (delete,) = [a for a in d.actions if isinstance(a, wd.Delete)]
    # Foreground: the Job stays, deleting, until its pod has ended (the budget counts it).
    assert delete.name == "j-train-1" and delete.foreground
    assert d.status.training is not None and d.status.training.segment == 1
    # The stop echoes the new grant: the job acts on nothing older from now on.
    assert d.status.power_share is not None and d.status.power_share.sequence == 2


def test_a_withdrawn_share_stops_and_waits() -> None:
    d = dc.decide(SPEC, training_status(4.9), world(job_with(None, "cap 2 W", seq=2)),
                  SETTINGS)
    assert d.status.phase is Phase.waiting_for_power and d.status.reason == "PowerWithdrawn"
    assert any(isinstance(a, wd.Delete) and a.name == "j-train-1" and a.foreground
               for a in d.actions)
    assert "cap 2 W" in d.status.message
    assert d.status.power_share is not None and d.status.power_share.sequence == 2


def test_a_deleted_budget_returns_the_job_to_its_own_limit() -> None:
    d = dc.decide(SPEC, training_status(4.2), world(job_with(4.2), budgets={}), SETTINGS)
    assert d.status.power_share is None
    assert d.status.phase is Phase.selecting and "4.2 W → 5.0 W" in d.status.message


def test_a_node_the_view_lost_keeps_its_share() -> None:
    """A node missing from the fleet view is not a node outside the budget: the job keeps its
    share (and stops as for a lost node) instead of re-planning at its own limit."""
    d = dc.decide(SPEC, training_status(4.2), world(job_with(4.2), nodes=()), SETTINGS)
    assert d.status.power_share is not None and d.status.power_share.watts == 4.2
    assert d.status.reason == "NodeLost"
    assert d.status.selection is not None and d.status.selection.power_limit_watts == 4.2


def test_a_job_on_a_budgeted_node_asks_for_a_sweep_before_it_profiles() -> None:
    st = status(Phase.profiling, efficiency=TRAINING["efficiency"])
    d = dc.decide(SPEC, st, world(configmaps={}), SETTINGS)
    assert d.status.phase is Phase.waiting_for_power
    share = d.status.power_share
    assert share is not None and share.purpose == "profile" and share.node == "n1"
    assert not any(isinstance(a, wd.Create) for a in d.actions)
    # Granted: the sweep runs with the grant as its pod's limit, echoing the grant.
    d = dc.decide(SPEC, d.status, world(job_with(5.0, seq=3, purpose="profile"),
                                        configmaps={}), SETTINGS)
    assert d.status.phase is Phase.profiling and d.status.power_share is not None
    assert d.status.power_share.sequence == 3
    d = dc.decide(SPEC, d.status, world(job_with(5.0, seq=3, purpose="profile"),
                                        configmaps={}), SETTINGS)
    (ds,) = [a for a in d.actions if isinstance(a, wd.Create) and a.plural == "daemonsets"]
    notes = ds.body["spec"]["template"]["metadata"]["annotations"]
    assert notes == {ANNOTATION_POWER_LIMIT_WATTS: "5", "edgetrain.io/power-grant-sequence": "3"}


def test_a_sweep_whose_grant_changed_stops() -> None:
    share = PowerShareStatus(budget="farm", node="n1", device_model="jetson-nano", watts=5.0,
                             purpose="profile", sequence=3)
    st = status(Phase.profiling, efficiency=TRAINING["efficiency"], power_share=share)
    ds_name = "j-profile-jetson-nano"
    d = dc.decide(SPEC, st, world(job_with(None, "cap lowered", seq=4, purpose="profile"),
                                  configmaps={}, daemonsets={ds_name: {"metadata": {
                                      "name": ds_name}}}), SETTINGS)
    assert d.status.phase is Phase.waiting_for_power and d.status.reason == "PowerWithdrawn"
    assert any(isinstance(a, wd.Delete) and a.plural == "daemonsets" and a.foreground
               for a in d.actions)
    assert d.status.power_share is not None and d.status.power_share.sequence == 4


def test_a_sweeps_grant_is_no_training_grant() -> None:
    st = status(Phase.selecting, efficiency=TRAINING["efficiency"],
                profiles=TRAINING["profiles"], power_share=SHARE.model_copy(
                    update={"purpose": "profile", "watts": 5.0, "sequence": 3}))
    d = dc.decide(SPEC, st, world(job_with(5.0, seq=3, purpose="profile")), SETTINGS)
    assert d.status.phase is Phase.waiting_for_power
    assert d.status.power_share is not None and d.status.power_share.purpose == "train"
    assert "asking for a train share" in d.status.message


# --- the budget's side -------------------------------------------------------------------

NANO_W = np.array([2.0, 3.0, 4.0, 5.0])
NANO_S = np.array([300.0, 180.0, 130.0, 110.0])
FARM = PowerBudgetSpec.model_validate({"nodeSelector": {"matchLabels": {"site": "farm"}},
                                       "capWatts": 9})


def site_node(name: str, site: str = "farm") -> NodeInfo:
    return NodeInfo(name, (("edgetrain.io/device-model", "jetson-nano"), ("site", site)), True)


NODES = (site_node("n1"), site_node("n2"), site_node("n3"), site_node("x1", "barn"))
IDLE = {"n1": 1.0, "n2": 1.0, "n3": 1.0, "x1": 1.0}


def bjob(name: str, node_name: str, *, phase: Phase = Phase.waiting_for_power,
         acked: int = 0, created: str = "", annotation: str | None = None,
         purpose: str = "train", own_limit_w: float = 5.0) -> BudgetJob:
    return BudgetJob(
        namespace="ns", name=name, phase=phase, node=node_name, own_limit_w=own_limit_w,
        created=created or f"2026-01-01T00:00:0{name[-1]}Z", annotation=annotation,
        acknowledged=acked, purpose="profile" if purpose == "profile" else "train",
        options=None if purpose == "profile" else JobOptions(
            "x", NANO_W, NANO_S, labels=((64, 1), (64, 2), (64, 3), (64, 4))))


def record(name: str, node_name: str, watts: float | None, seq: int = 1, acked: int = 1,
           held: float | None = -1.0, purpose: str = "train") -> BudgetAllocationStatus:
    """A grant the budget issued before (held: what the job may still act on; default the
    grant itself, as once acknowledged)."""
    return BudgetAllocationStatus(namespace="ns", name=name, node=node_name, watts=watts,
                                  sequence=seq, acknowledged=acked,
                                  held_watts=watts if held == -1.0 else held,
                                  purpose="profile" if purpose == "profile" else "train")


def running(name: str, node_name: str, watts: float, seq: int = 1) -> tuple[
        BudgetJob, BudgetAllocationStatus]:
    """A job training under an acknowledged grant (its notice as the budget wrote it)."""
    text = allocation_annotation("farm", watts, node=node_name, sequence=seq)
    return (bjob(name, node_name, phase=Phase.training, acked=seq, annotation=text),
            record(name, node_name, watts, seq, seq))


def budget(jobs: list[BudgetJob], spec: PowerBudgetSpec = FARM,
           others: dict[str, LabelSelector] | None = None,
           records: list[BudgetAllocationStatus] | None = None,
           pods: tuple[PodLimit, ...] = (), rules: Rules = Rules()) -> Any:
    seq = max((r.sequence for r in records or []), default=0)
    return decide_budget("farm", spec, PowerBudgetStatus(allocations=records or [],
                                                         sequence=seq), generation=1,
                         seconds_of_day=0.0, nodes=NODES, node_idle_w=IDLE,
                         others=others or {"farm": FARM.node_selector}, jobs=jobs, pods=pods,
                         rules=rules)


def grants(d: Any) -> dict[str, float | None]:
    return {w.name: (parse_allocation(w.text) or GrantNotice("", None)).watts for w in d.writes}


def notice(d: Any, name: str) -> GrantNotice:
    (write,) = [w for w in d.writes if w.name == name]
    out = parse_allocation(write.text)
    assert out is not None
    return out


def test_three_waiting_jobs_share_nine_watts() -> None:
    d = budget([bjob("a1", "n1"), bjob("a2", "n2"), bjob("a3", "n3")])
    assert grants(d) == {"a1": 3.0, "a2": 3.0, "a3": 3.0}
    assert d.status.planned_watts == 9.0 and d.status.jobs == 3 and d.status.waiting == 0
    assert d.status.authorised_watts == 9.0
    assert d.status.nodes == ["n1", "n2", "n3"]  # x1 is another site's
    assert [a.batch_size for a in d.status.allocations] == [64, 64, 64]
    # Each grant has its own sequence number, in the notice and in the record.
    assert sorted(notice(d, n).sequence for n in ("a1", "a2", "a3")) == [1, 2, 3]
    assert d.status.sequence == 3
    assert {a.name: (a.sequence, a.acknowledged, a.held_watts)
            for a in d.status.allocations} == {"a1": (1, 0, 3.0), "a2": (2, 0, 3.0),
                                               "a3": (3, 0, 3.0)}
    assert d.events[0][1] == "Allocated"


def test_a_job_that_does_not_fit_waits_with_the_numbers() -> None:
    (j1, r1), (j2, r2) = running("a1", "n1", 3.0, 1), running("a2", "n2", 3.0, 2)
    d = budget([j1, j2, bjob("a3", "n3")], FARM.model_copy(update={"cap_watts": 5.5}),
               records=[r1, r2])
    share = notice(d, "a3")
    assert share.watts is None and "needs 2.00 W" in share.reason
    assert d.status.waiting == 1


def test_one_job_per_node_the_fourth_waits_for_a_node() -> None:
    pairs = [running(f"a{i}", f"n{i}", 2.0, i) for i in (1, 2, 3)]
    d = budget([*(j for j, _ in pairs), bjob("a4", "n3")], records=[r for _, r in pairs])
    share = notice(d, "a4")
    assert share.watts is None
    assert "every node of its device model on the site runs a job" in share.reason


def test_waiting_jobs_asking_on_one_node_are_spread() -> None:
    d = budget([bjob("a1", "n1"), bjob("a2", "n1"), bjob("a3", "n1")])
    nodes = {w.name: json.loads(w.text)["node"] for w in d.writes}
    assert nodes == {"a1": "n1", "a2": "n2", "a3": "n3"}
    assert d.status.planned_watts == 9.0


def test_a_lowered_cap_lowers_at_once_and_counts_what_the_jobs_still_hold() -> None:
    pairs = [running(f"a{i}", f"n{i}", 3.0, i) for i in (1, 2, 3)]
    d = budget([j for j, _ in pairs], FARM.model_copy(update={"cap_watts": 6.0}),
               records=[r for _, r in pairs])
    assert grants(d) == {"a1": 2.0, "a2": 2.0, "a3": 2.0}
    # Issued, not yet echoed: each job may still act on its 3 W until it echoes.
    assert d.status.planned_watts == 6.0 and d.status.authorised_watts == 9.0


def test_a_raise_waits_for_the_echo_and_for_the_older_pods() -> None:
    """The lower-then-raise race of issue 39: a1 was lowered from 4 to 2 W (grant 3) but has
    not echoed it; a freed node's job may not start, whatever a1's phase looks like."""
    records = [record("a1", "n1", 2.0, seq=3, acked=1, held=4.0),
               record("a2", "n2", 2.0, seq=2, acked=2)]
    jobs = [bjob("a1", "n1", phase=Phase.selecting, acked=1),
            bjob("a2", "n2", phase=Phase.training, acked=2), bjob("a3", "n3")]
    d = budget(jobs, records=records)
    assert grants(d).get("a3") is None and "raises wait" in d.status.message
    # a2 may rise to 3 W (a1 keeps its 4 W, n3 idle): 8 W; a3's 3 W would make 10 W.
    assert grants(d).get("a2") == 3.0 and d.status.authorised_watts == 8.0
    # a1 echoes grant 3, but its old pod (4 W) is still terminating: a3 still waits.
    jobs[0] = bjob("a1", "n1", phase=Phase.training, acked=3)
    old_pod = (PodLimit("n1", 4.0, "a1-train-1"),)
    d = budget(jobs, records=records, pods=old_pod)
    assert grants(d).get("a3") is None and d.status.authorised_watts == 8.0
    # The pod ended: a3 starts (the cap fits 2 + 2 + its 3 W... and the others get more later).
    d = budget(jobs, records=records)
    assert grants(d).get("a3") is not None
    assert (d.status.authorised_watts or 0) <= 9.0


def test_a_stale_echo_never_releases_a_grant() -> None:
    rec = record("a1", "n1", 2.0, seq=3, acked=3, held=2.0)
    text = allocation_annotation("farm", 2.0, node="n1", sequence=3)
    d = budget([bjob("a1", "n1", phase=Phase.training, acked=1, annotation=text)],
               records=[rec], spec=FARM.model_copy(update={"cap_watts": 4.0}))
    (alloc,) = d.status.allocations
    assert (alloc.acknowledged, alloc.held_watts) == (3, 2.0) and d.writes == []


def test_finished_jobs_free_their_share() -> None:
    (j2, r2) = running("a2", "n2", 4.0, 2)
    jobs = [bjob("a1", "n1", phase=Phase.succeeded, acked=1), j2]
    d = budget(jobs, records=[record("a1", "n1", 4.0, 1, 1), r2])
    assert grants(d) == {"a2": 5.0}
    assert d.status.planned_watts == 7.0  # a2's 5 W and two idle nodes


def test_overlapping_budgets_plan_nothing_new() -> None:
    others = {"farm": FARM.node_selector, "barn": LabelSelector.model_validate(
        {"matchLabels": {"edgetrain.io/device-model": "jetson-nano"}})}
    (j1, r1) = running("a1", "n1", 3.0, 1)
    d = budget([j1, bjob("a2", "n2")], others=others, records=[r1])
    assert [w.name for w in d.writes] == ["a2"]
    share = notice(d, "a2")
    assert share.watts is None and "also under PowerBudget barn" in share.reason
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
    pairs = [running("a1", "n1", 4.0, 1), running("a2", "n2", 3.0, 2),
             running("a3", "n3", 2.0, 3)]
    d = budget([j for j, _ in pairs], records=[r for _, r in pairs])
    assert grants(d) == {"a1": 3.0}
    # Within 2 % of the best: the running jobs keep their grants.
    close = [running(f"a{i}", f"n{i}", 3.0, i) for i in (1, 2, 3)]
    assert budget([j for j, _ in close], FARM.model_copy(update={"cap_watts": 9.04}),
                  records=[r for _, r in close]).writes == []


def test_among_equal_splits_the_current_grants_win() -> None:
    """Two jobs, two equally good splits (4 + 3 or 3 + 4 W): a new job's arrival must not swap
    the running job onto the lower point (issue 39's tie)."""
    tie_w, tie_s = np.array([3.0, 4.0]), np.array([200.0, 150.0])

    def tied(name: str, node_name: str, phase: Phase, acked: int) -> BudgetJob:
        text = allocation_annotation("farm", 4.0, node=node_name, sequence=1) if acked else None
        return replace(bjob(name, node_name, phase=phase, acked=acked, annotation=text),
                       options=JobOptions("x", tie_w, tie_s, labels=((64, 1), (64, 2))))

    seven = FARM.model_copy(update={"cap_watts": 8.0})  # 1 W idle n3 + 7 W for the two
    jobs = [tied("a1", "n1", Phase.training, 1), tied("a2", "n2", Phase.waiting_for_power, 0)]
    d = budget(jobs, seven, records=[record("a1", "n1", 4.0, 1, 1)])
    assert "a1" not in grants(d) and grants(d)["a2"] == 3.0
    d = budget(jobs, seven, records=[record("a1", "n1", 4.0, 1, 1)],
               rules=Rules(current_grants_win_ties=False))
    assert grants(d) == {"a1": 3.0, "a2": None}  # the swap: a1 lowered, a2 waits for it


def test_a_sweep_gets_its_whole_ceiling_or_waits() -> None:
    (j1, r1) = running("a1", "n1", 4.0, 1)
    j1 = replace(j1, own_limit_w=4.0)  # its plan at 4 W is its best
    sweep = bjob("a2", "n2", purpose="profile")
    d = budget([j1, sweep], records=[r1])
    # 9 W cap, n1 at 4 W, n3 idle 1 W: 4 W left for n2, its own limit is 5 W: it waits.
    share = notice(d, "a2")
    assert share.watts is None and "needs a 5.00 W ceiling" in share.reason
    d = budget([j1, replace(sweep, own_limit_w=4.0)], records=[r1])
    share = notice(d, "a2")
    assert (share.watts, share.purpose) == (4.0, "profile")
    assert d.status.profiling_watts == 4.0 and d.status.authorised_watts == 9.0


def test_a_sweep_under_way_keeps_its_ceiling() -> None:
    (j1, r1) = running("a1", "n1", 3.0, 1)
    sweep = bjob("a2", "n2", purpose="profile", acked=2)
    d = budget([j1, sweep, bjob("a3", "n3")],
               records=[r1, record("a2", "n2", 5.0, 2, 2, purpose="profile")])
    assert d.writes == [] or grants(d).get("a3") is None
    (alloc,) = [a for a in d.status.allocations if a.name == "a2"]
    assert (alloc.watts, alloc.purpose) == (5.0, "profile")
