"""Start and transition Events are posted once and never lost when a replica dies mid-step.

The replica's death is a prefix of one reconcile's actions carried out, and no status write;
the next replica decides again from the stored status. Events are a ledger keyed by name, as
the API server keeps them (a second create of one name is refused with 409)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from edgetrain.api.efficiency import EfficiencyPart
from edgetrain.api.job_status import Phase, PowerAwareTrainingJobStatus
from edgetrain.kube import now_rfc3339
from edgetrain.operator import decide as dc
from edgetrain.operator import manifests as mf
from edgetrain.operator import world as wd
from tests.operator.test_decide import (
    DS,
    EFF_KEY,
    JOB,
    NOW,
    PROF_CM,
    PROF_CSV,
    SETTINGS,
    SPEC,
    job,
    node,
)

ONCE = ("Started", "EstimateStarted", "EfficiencyReady", "ProfilingStarted", "ProfilesReady",
        "Planned", "TrainingStarted")


class Died(Exception):
    """The replica was killed (SIGKILL) before its next action."""


class Cluster:
    """What the API server holds for one job: its workloads, cache entries and Events."""

    def __init__(self) -> None:
        self.workloads: set[str] = set()
        self.configmaps: dict[str, dict[str, str]] = {}
        self.events: dict[str, str] = {}  # Event name → reason
        self.unkeyed: list[str] = []  # kopf's Events, posted after the status write

    def world(self) -> wd.World:
        jobs = {n: {**job("running"), "metadata": {"name": n, "uid": f"uid-{n}"}}
                for n in self.workloads if "-profile-" not in n}
        return wd.World(job=JOB, now_s=NOW, nodes=(node("n1"),), worker_identity=True,
                        configmaps=self.configmaps, jobs=jobs,
                        daemonsets={n: {} for n in self.workloads if "-profile-" in n})

    def act(self, action: wd.Action) -> None:
        if isinstance(action, wd.PostEvent):
            if action.key is not None:
                body = mf.job_event(JOB, action.type, action.reason, action.message, action.key,
                                    now_rfc3339())
                self.events.setdefault(body["metadata"]["name"], action.reason)  # 409: kept
        elif isinstance(action, wd.Create):
            if action.plural == "configmaps":  # 409 on a second create: the first one stays
                self.configmaps.setdefault(action.body["metadata"]["name"],
                                           dict(action.body.get("data") or {}))
            else:
                self.workloads.add(action.body["metadata"]["name"])
        elif isinstance(action, wd.Delete):
            self.workloads.discard(action.name)

    def reconcile(self, status: PowerAwareTrainingJobStatus, dies_after: int | None
                  ) -> PowerAwareTrainingJobStatus:
        """`Reconciler.reconcile` over this cluster: up to five steps, acting in order, ending
        after a workload's creation; Died after `dies_after` actions."""
        done, events = 0, []
        for _ in range(5):
            decision = dc.decide(SPEC, status, self.world(), SETTINGS)
            for action in decision.actions:
                if done == dies_after:
                    raise Died
                self.act(action)
                done += 1
            events += [e.reason for e in decision.events if e.key is None]
            before, status = status.phase, decision.status
            if status.phase is before or any(
                    isinstance(a, wd.Create) and a.plural in ("jobs", "daemonsets")
                    for a in decision.actions):
                break
        self.unkeyed += events  # posted by kopf once the status is written
        return status

    def workers_finish(self) -> None:
        """The estimate's pods publish their parts (the operator merges them into the cache)
        and the profiling workers publish what they make."""
        if "j-estimate-0" in self.workloads:
            self.configmaps["j-estimate-0-parts"] = {
                f"part-{i}.json": EfficiencyPart(
                    tag=f"{EFF_KEY}/uid-j-estimate-0", index=i, model="resnet8-w025",
                    dataset="digits", target_accuracy=0.87, batch_size=b, seed=0,
                    samples_to_accuracy=40000, best_accuracy=0.9).model_dump_json()
                for i, b in enumerate(SPEC.batch_sizes)}
        if DS in self.workloads:
            self.configmaps[PROF_CM] = {"profile.csv": PROF_CSV}


def walk(dies_after: int | None) -> tuple[Cluster, PowerAwareTrainingJobStatus]:
    """Pending to Training, a replica killed after `dies_after` actions of every reconcile
    (a standby takes over and reconciles from the stored status)."""
    cluster, status = Cluster(), PowerAwareTrainingJobStatus()
    for _ in range(10):
        try:
            status = cluster.reconcile(status, dies_after)
        except Died:
            status = cluster.reconcile(status, None)
        cluster.workers_finish()
        if status.phase is Phase.training and status.training and status.training.job:
            break
    return cluster, status


@pytest.mark.parametrize("dies_after", [None, 0, 1, 2, 3, 4])
def test_each_start_event_is_posted_exactly_once_whatever_the_replica_dies_after(
        dies_after: int | None) -> None:
    cluster, status = walk(dies_after)
    assert status.phase is Phase.training and status.training and status.training.job
    posted = Counter(cluster.events.values())
    assert all(posted[r] == 1 for r in ONCE), posted
    assert sorted(cluster.workloads) == ["j-estimate-0", "j-train-1"]  # DaemonSet deleted


def test_a_start_event_precedes_the_object_it_announces() -> None:
    """Announced before created: a replica killed between the two leaves no unannounced
    object (the next replica sees the object and would not announce it)."""
    decision = dc.decide(SPEC, PowerAwareTrainingJobStatus(phase=Phase.estimating,
                                                           transitions=1),
                         wd.World(job=JOB, now_s=NOW), SETTINGS)
    kinds = [type(a).__name__ for a in decision.actions]
    assert kinds == ["PostEvent", "Create", "Create"]  # the Event, the parts, the Job


def test_event_names_are_per_job_and_key() -> None:
    other: dict[str, Any] = {"metadata": {**JOB["metadata"], "uid": "another-uid"}}
    a = mf.job_event(JOB, "Normal", "Planned", "m", "t3-Planned", "now")
    assert a["metadata"]["name"] == mf.job_event(JOB, "Normal", "Planned", "other text",
                                                 "t3-Planned", "later")["metadata"]["name"]
    assert a["metadata"]["name"] != mf.job_event(other, "Normal", "Planned", "m",
                                                 "t3-Planned", "now")["metadata"]["name"]
    assert a["metadata"]["name"] != mf.job_event(JOB, "Normal", "Planned", "m",
                                                 "t5-Planned", "now")["metadata"]["name"]
    assert a["involvedObject"]["uid"] == JOB["metadata"]["uid"]


def test_a_replan_is_announced_again() -> None:
    """Keys count the phase's entries: a second Planned (after a node loss) is its own Event."""
    cluster, status = walk(None)
    first = dict(cluster.events)
    # The node is lost: Selecting again, then Planned and TrainingStarted a second time.
    lost = dc.decide(SPEC, status, wd.World(job=JOB, now_s=NOW, configmaps=cluster.configmaps,
                                            jobs={"j-train-1": job("running")}), SETTINGS)
    for action in lost.actions:
        cluster.act(action)
    assert lost.status.phase is Phase.selecting
    again = lost.status
    cluster.workloads.discard("j-train-1")
    for _ in range(2):
        decision = dc.decide(SPEC, again, wd.World(
            job=JOB, now_s=NOW, nodes=(node("n1"), node("n2")),
            configmaps=cluster.configmaps), SETTINGS)
        for action in decision.actions:
            cluster.act(action)
        again = decision.status
    posted = Counter(cluster.events.values())
    assert posted["Planned"] == 2 and posted["TrainingStarted"] == 2, posted
    assert set(first) < set(cluster.events)
