"""Start and transition Events are posted once and never lost when a replica dies mid-step.

A reconcile decides (the real `Reconciler.decide_all`), then writes in the real order
(`reconcile.act_then_record`): the deletes, the status write carrying the ledger of its keyed
Events (`events.ledger`), the creates; the keyed Events are posted after. The replica's death
is a prefix of those writes and posts carried out; the next replica starts from the stored
status, posts what its ledger holds (the first reconcile of a job in a process, handlers.py),
and decides again. Events are a ledger keyed by name, as the API server keeps them (a second
create of one name is refused with 409)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from edgetrain.api.efficiency import EfficiencyPart
from edgetrain.api.job_status import PendingEvent, Phase, PowerAwareTrainingJobStatus
from edgetrain.kube import KubeClient, Obj, now_rfc3339
from edgetrain.operator import decide as dc
from edgetrain.operator import events as ev
from edgetrain.operator import manifests as mf
from edgetrain.operator import world as wd
from edgetrain.operator.reconcile import Indexes, Reconciler, act_then_record
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

SPEC_WIRE = SPEC.model_dump(mode="json", by_alias=True, exclude_none=True)
ONCE = ("Started", "EstimateStarted", "EfficiencyReady", "ProfilingStarted", "ProfilesReady",
        "Planned", "TrainingStarted")


class Died(Exception):
    """The replica was killed (SIGKILL) before its next write."""


class Cluster:
    """What the API server holds for one job: its status, workloads, cache entries, Events."""

    def __init__(self) -> None:
        self.status = PowerAwareTrainingJobStatus()
        self.workloads: set[str] = set()
        self.configmaps: dict[str, dict[str, str]] = {}
        self.events: dict[str, str] = {}  # Event name → reason

    def world(self, made: Mapping[str, Mapping[str, str]] | None = None) -> wd.World:
        jobs = {n: {**job("running"), "metadata": {"name": n, "uid": f"uid-{n}"}}
                for n in self.workloads if "-profile-" not in n}
        return wd.World(job=JOB, now_s=NOW, nodes=(node("n1"),), worker_identity=True,
                        configmaps={**self.configmaps, **(made or {})}, jobs=jobs,
                        daemonsets={n: {} for n in self.workloads if "-profile-" in n})

    def post(self, event: PendingEvent) -> None:
        body = mf.job_event(JOB, event.type, event.reason, event.message, event.key,
                            now_rfc3339())
        self.events.setdefault(body["metadata"]["name"], event.reason)  # 409: kept

    def act(self, action: wd.Action) -> None:
        if isinstance(action, wd.Create):
            if action.plural == "configmaps":  # 409 on a second create: the first one stays
                self.configmaps.setdefault(action.body["metadata"]["name"],
                                           dict(action.body.get("data") or {}))
            else:
                self.workloads.add(action.body["metadata"]["name"])
        elif isinstance(action, wd.Delete):
            self.workloads.discard(action.name)

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


class Replica(Reconciler):
    """The real reconciler over the cluster above (its world in place of the watches)."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(KubeClient.__new__(KubeClient), SETTINGS)  # sends nothing
        self.cluster = cluster
        self.posted: set[str] = set()  # keys seen posted by this replica (the poster's)

    def world(self, patj: Obj, status: PowerAwareTrainingJobStatus, spec: Any,
              indexes: Indexes, entered: bool = False, fresh: bool = False,
              made: Mapping[str, Mapping[str, str]] | None = None) -> wd.World:
        return self.cluster.world(made)

    def run(self, dies_after: int | None, first: bool) -> None:
        """One reconcile as handlers.py carries it out; Died after `dies_after` writes."""
        done = 0

        def write() -> None:
            nonlocal done
            if done == dies_after:
                raise Died
            done += 1

        cluster = self.cluster
        if first:  # a replica's first sight of the job: its predecessor's ledger
            for event in cluster.status.pending_events:
                write()
                cluster.post(event)
                self.posted.add(event.key)
        step = self.decide_all({**JOB, "spec": SPEC_WIRE, "status": cluster.status.wire()})
        first, rest = act_then_record(step)
        for action in first:
            write()
            cluster.act(action)
        entries = ev.pending(step.keyed)
        write()  # the status write, with the ledger
        cluster.status = step.status.model_copy(update={"pending_events": ev.ledger(
            cluster.status.pending_events, entries, self.posted)})
        for action in rest:
            write()
            cluster.act(action)
        for event in entries:  # the poster, after the writes
            write()
            cluster.post(event)
            self.posted.add(event.key)


def walk(dies_after: int | None) -> Cluster:
    """Pending to Training, a replica killed after `dies_after` writes of every reconcile
    (a standby takes over: its first reconcile posts the ledger and decides again)."""
    cluster = Cluster()
    replica = Replica(cluster)
    first = True
    for _ in range(12):
        try:
            replica.run(dies_after, first)
            first = False
        except Died:
            replica = Replica(cluster)
            replica.run(None, True)
            first = False
        cluster.workers_finish()
        status = cluster.status
        if status.phase is Phase.training and status.training and status.training.job:
            break
    return cluster


@pytest.mark.parametrize("dies_after", [None, 0, 1, 2, 3, 4, 5, 6])
def test_each_start_event_is_posted_exactly_once_whatever_the_replica_dies_after(
        dies_after: int | None) -> None:
    cluster = walk(dies_after)
    status = cluster.status
    assert status.phase is Phase.training and status.training and status.training.job
    posted = Counter(cluster.events.values())
    assert all(posted[r] == 1 for r in ONCE), posted
    assert sorted(cluster.workloads) == ["j-estimate-0", "j-train-1"]  # DaemonSet deleted


def test_the_status_write_comes_before_what_it_announces_and_the_events_after() -> None:
    """Act, then record: the phase is written before the Job it announces is made, and the
    keyed Events are no write of the critical path (posted after every write)."""
    step = Replica(Cluster()).decide_all({**JOB, "spec": SPEC_WIRE, "status": {}})
    assert step.status.phase is Phase.estimating
    first, rest = act_then_record(step)
    assert first == []  # nothing before the phase
    assert [(type(a).__name__, getattr(a, "plural", "")) for a in rest] == [
        ("Create", "jobs")]  # the estimate Job
    assert [e.reason for e in step.keyed] == ["Started", "EstimateStarted"]


def test_a_start_event_precedes_the_object_it_announces() -> None:
    """Announced before created: the decision lists the Event first, and the ledger that
    carries it is written before the object is made (a replica killed between the two leaves
    no unannounced object: the next one posts the ledger)."""
    decision = dc.decide(SPEC, PowerAwareTrainingJobStatus(phase=Phase.estimating,
                                                           transitions=1),
                         wd.World(job=JOB, now_s=NOW), SETTINGS)
    kinds = [type(a).__name__ for a in decision.actions]
    assert kinds == ["PostEvent", "Create"]  # the Event, the Job (its pods make the parts)


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
    cluster = walk(None)
    first = dict(cluster.events)
    # The node is lost: Selecting again, then Planned and TrainingStarted a second time.
    lost = dc.decide(SPEC, cluster.status, wd.World(
        job=JOB, now_s=NOW, configmaps=cluster.configmaps,
        jobs={"j-train-1": job("running")}), SETTINGS)
    for action in lost.actions:
        cluster.act(action)
        if isinstance(action, wd.PostEvent):
            cluster.post(ev.pending([action])[0])
    assert lost.status.phase is Phase.selecting
    again = lost.status
    cluster.workloads.discard("j-train-1")
    for _ in range(2):
        decision = dc.decide(SPEC, again, wd.World(
            job=JOB, now_s=NOW, nodes=(node("n1"), node("n2")),
            configmaps=cluster.configmaps), SETTINGS)
        for action in decision.actions:
            cluster.act(action)
        for entry in ev.pending(decision.events):
            cluster.post(entry)
        again = decision.status
    posted = Counter(cluster.events.values())
    assert posted["Planned"] == 2 and posted["TrainingStarted"] == 2, posted
    assert set(first) < set(cluster.events)
