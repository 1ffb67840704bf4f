"""Leader election: the decision as a table (no cluster), then two electors against the real
API server (takeover after the holder dies, a clean release, one winner among racers)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from edgetrain.cluster import KubeClient
from edgetrain.operator.leader import (
    Action,
    LeaderElector,
    LeaseRecord,
    LeaseTiming,
    decide,
    default_identity,
    lease_spec,
)
from edgetrain.operator.settings import load_settings

HELD = LeaseRecord(holder="b_1", lease_duration_s=15, renew_time="t1", transitions=2,
                   resource_version="7")


@pytest.mark.parametrize(
    ("record", "observed_at_s", "now_s", "action"),
    [
        (None, None, 0.0, Action.create),  # no Lease yet
        (HELD, 100.0, 100.0, Action.wait),  # just saw it change: the holder is alive
        (HELD, 100.0, 114.9, Action.wait),  # not a full lease duration on our clock yet
        (HELD, 100.0, 115.0, Action.take),  # unchanged for the lease duration: expired
        (HELD, None, 1e9, Action.wait),  # never observed: cannot judge expiry
        (LeaseRecord(holder="a_1", lease_duration_s=15), 0.0, 0.0, Action.renew),  # ours
        (LeaseRecord(holder="a_1", lease_duration_s=15), 0.0, 1e9, Action.renew),
        (LeaseRecord(holder="", lease_duration_s=1), 0.0, 0.0, Action.take),  # released
    ],
)
def test_decide(record: LeaseRecord | None, observed_at_s: float | None, now_s: float,
                action: Action) -> None:
    assert decide(record, "a_1", observed_at_s, now_s) is action


def test_lease_spec_counts_transitions_and_keeps_acquire_time() -> None:
    timing = LeaseTiming(15, 10, 2)
    renew = lease_spec(Action.renew, LeaseRecord(holder="a_1", acquire_time="t0",
                                                 transitions=3), "a_1", timing)
    assert (renew["acquireTime"], renew["leaseTransitions"]) == ("t0", 3)
    take = lease_spec(Action.take, HELD, "a_1", timing)
    assert take["holderIdentity"] == "a_1" and take["leaseTransitions"] == 3
    assert take["acquireTime"] == take["renewTime"] and take["leaseDurationSeconds"] == 15
    released = LeaseRecord(holder="", transitions=3)
    assert lease_spec(Action.take, released, "a_1", timing)["leaseTransitions"] == 3
    assert lease_spec(Action.create, None, "a_1", timing)["leaseTransitions"] == 0


def test_record_from_lease_and_identity() -> None:
    rec = LeaseRecord.from_lease({"metadata": {"resourceVersion": "42"}, "spec": {
        "holderIdentity": "p_1", "leaseDurationSeconds": 15, "renewTime": "r",
        "leaseTransitions": 4}})
    assert rec == LeaseRecord("p_1", 15.0, None, "r", 4, "42")
    assert LeaseRecord.from_lease({"metadata": {}}).holder == ""
    a, b = default_identity("op-7d9f"), default_identity("op-7d9f")
    assert a.startswith("op-7d9f_") and a != b  # a restarted container is a new candidate


def test_timing_order_is_checked_with_the_variables_named() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseTiming(15, 15, 2)
    with pytest.raises(ValueError, match="EDGETRAIN_OPERATOR_RENEW_DEADLINE_S"):
        load_settings({"EDGETRAIN_OPERATOR_LEASE_DURATION_S": "5",
                       "EDGETRAIN_OPERATOR_RENEW_DEADLINE_S": "10"})
    s = load_settings({"EDGETRAIN_OPERATOR_LEADER_ELECTION": "true",
                       "EDGETRAIN_OPERATOR_LEADER_ELECTION_NAMESPACE": "none"})
    assert s.leader_election and s.leader_election_namespace is None
    assert (s.lease_duration_s, s.renew_deadline_s, s.retry_period_s) == (15, 10, 2)


FAST = LeaseTiming(lease_duration_s=3.0, renew_deadline_s=2.0, retry_period_s=0.3)


def _elector(kube: KubeClient, ns: str, who: str) -> LeaderElector:
    return LeaderElector(KubeClient(kube.configuration, timeout_s=1.0), ns, "op-lease", who, FAST)


@pytest.mark.cluster
def test_standby_takes_over_when_the_holder_dies(kube: KubeClient, namespace: str) -> None:
    """Real API server: A holds, B stands by; A stops renewing (killed) and B takes the Lease
    within one lease duration of A's last renewal; a clean release hands over at once."""
    a, b = _elector(kube, namespace, "a_1"), _elector(kube, namespace, "b_1")
    stop = threading.Event()
    assert a.acquire(stop)
    a_stop = threading.Event()
    lost: list[str] = []
    a.keep(a_stop, lambda: lost.append("a"))
    # B stands by while A renews.
    standby = threading.Thread(target=b.acquire, args=(stop,), daemon=True)
    standby.start()
    standby.join(timeout=FAST.lease_duration_s * 2)
    assert standby.is_alive(), "B acquired a Lease that A renews"
    # A dies: no more renewals, no release.
    died = time.monotonic()
    a_stop.set()
    standby.join(timeout=FAST.lease_duration_s * 3)
    took_s = time.monotonic() - died
    assert not standby.is_alive()
    assert FAST.lease_duration_s - 2 * FAST.retry_period_s <= took_s \
        <= FAST.lease_duration_s + 3 * FAST.retry_period_s, took_s
    lease = LeaseRecord.from_lease(kube.get(a.path))
    assert lease.holder == "b_1" and lease.transitions == 1
    assert not lost  # A was stopped, it did not lose the Lease while acting
    # A (restarted as a new candidate) sees B's renewals and waits; B releases: A takes it.
    b_stop = threading.Event()
    b.keep(b_stop, lambda: lost.append("b"))
    a2 = _elector(kube, namespace, "a_2")
    assert not a2.try_acquire_or_renew()
    b_stop.set()
    b.release()
    released = time.monotonic()
    assert a2.acquire(stop)
    assert time.monotonic() - released < FAST.retry_period_s + 1.0
    assert LeaseRecord.from_lease(kube.get(a.path)).holder == "a_2"


@pytest.mark.cluster
def test_a_holder_that_cannot_renew_stops(kube: KubeClient, namespace: str) -> None:
    """Another writer took the Lease (the holder was partitioned away): the holder's watchdog
    calls on_lost within the renew deadline."""
    a = _elector(kube, namespace, "a_1")
    stop = threading.Event()
    assert a.acquire(stop)
    lost = threading.Event()
    a.keep(stop, lost.set)
    lease = kube.get(a.path)
    lease["spec"]["holderIdentity"] = "intruder"
    kube.replace(a.path, lease)
    assert lost.wait(FAST.renew_deadline_s + 1.0)
    stop.set()


@pytest.mark.cluster
def test_racing_candidates_one_wins(kube: KubeClient, namespace: str) -> None:
    """Five candidates at once on a free Lease: the resourceVersion check lets one win."""
    electors = [_elector(kube, namespace, f"c_{i}") for i in range(5)]
    barrier = threading.Barrier(len(electors))
    wins: list[str] = []

    def race(e: LeaderElector) -> None:
        barrier.wait()
        if e.try_acquire_or_renew():
            wins.append(e.identity)

    threads = [threading.Thread(target=race, args=(e,)) for e in electors]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1, wins
    assert LeaseRecord.from_lease(kube.get(electors[0].path)).holder == wins[0]
    # Released: the other four race to take it over (a PUT on the same resourceVersion).
    winner = next(e for e in electors if e.identity == wins[0])
    winner.release()
    rest = [e for e in electors if e is not winner]
    barrier, wins[:] = threading.Barrier(len(rest)), []
    threads = [threading.Thread(target=race, args=(e,)) for e in rest]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1, wins


def test_chart_renders_leader_election() -> None:
    """The chart: the Lease's Role in the release namespace, the settings as env, two replicas
    allowed with leader election and refused without it."""
    from tests.observability.test_chart import CHART, KUBE_VERSION, helm, render

    def template(*sets: str) -> Any:
        args = ["template", "t", str(CHART), "--kube-version", KUBE_VERSION]
        for value in sets:
            args += ["--set", value]
        return helm(*args, check=False)

    docs = render("operator.replicas=2")
    dep = next(d for d in docs if d["kind"] == "Deployment")
    assert dep["spec"]["replicas"] == 2
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]
           ["env"]}
    assert env["EDGETRAIN_OPERATOR_LEADER_ELECTION"] == "true"
    assert env["EDGETRAIN_OPERATOR_LEADER_ELECTION_NAMESPACE"] == "edgetrain"
    assert (env["EDGETRAIN_OPERATOR_LEASE_DURATION_S"], env["EDGETRAIN_OPERATOR_RENEW_DEADLINE_S"],
            env["EDGETRAIN_OPERATOR_RETRY_PERIOD_S"]) == ("15", "10", "2")
    assert "POD_NAME" in env
    role = next(d for d in docs if d["kind"] == "Role"
                and d["metadata"]["name"].endswith("-operator-leader-election"))
    assert role["metadata"]["namespace"] == "edgetrain"
    assert {"resources": ["leases"], "apiGroups": ["coordination.k8s.io"],
            "resourceNames": ["edgetrain-operator"], "verbs": ["get", "update"]} in role["rules"]
    binding = next(d for d in docs if d["kind"] == "RoleBinding"
                   and d["roleRef"]["name"] == role["metadata"]["name"])
    assert binding["subjects"][0]["name"] == "t-edgetrain-operator"
    off = render("operator.leaderElection.enabled=false")
    assert not [d for d in off if d["kind"] == "Role"]
    out = template("operator.replicas=2", "operator.leaderElection.enabled=false")
    assert out.returncode != 0 and "needs operator.leaderElection.enabled=true" in out.stderr
    out = template("operator.leaderElection.renewDeadlineSeconds=20")
    assert out.returncode != 0 and "retryPeriodSeconds < renewDeadlineSeconds" in out.stderr
