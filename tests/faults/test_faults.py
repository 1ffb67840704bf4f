"""The fault suite: faults injected into edgetrain installed from the chart (two operator
replicas with leader election, node agents) on the real control plane, while jobs run.

Each case asserts the job's final state and that no more than one checkpoint interval of
training was lost (the trainer checkpoints at every evaluation; a resumed segment reports the
samples it resumed from). The table of faults, recovery times, jobs lost and pins leaked is
printed at the end of the run and written to <pytest basetemp>/faults-summary.json.
"""

from __future__ import annotations

import itertools
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edgetrain.bench.budget_live import AuthorisedWatch
from edgetrain.cluster import api_path
from edgetrain.node_agent.state import load_state
from edgetrain.operator.phases import unix_seconds
from tests.faults.causes import blocked_workers, said_at
from tests.faults.conftest import (
    CHECKPOINT_INTERVAL,
    LEASE,
    SUMMARY,
    FaultRecord,
    Fleet,
    pod_ready,
)
from tests.node_agent.helpers import wait_until
from tests.operator.budgets import (
    BudgetWatch,
    budget_path,
    create_budget,
    get_budget,
    seed_profile,
    set_cap,
    site_options,
    training_with_samples,
)
from tests.operator.conftest import patj_path, seed_efficiency

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
# A takeover waits for the Lease to expire on the standby's clock (lease duration after the
# last renewal it saw) plus one retry; the rest is slack for a loaded 2-core machine.
TAKEOVER_MAX_S = LEASE["leaseDurationSeconds"] + 2 * LEASE["retryPeriodSeconds"] + 10


def record(rec: FaultRecord) -> FaultRecord:
    SUMMARY.append(rec)
    return rec


def test_two_replicas_only_the_lease_holder_acts(fleet: Fleet) -> None:
    """Both replicas are Ready; the Lease holder runs kopf, the other stands by."""
    pods = fleet.operator_pods()
    assert len(pods) == 2 and all(pod_ready(p) for p in pods), fleet.diagnose()
    holder = fleet.holder()
    leader = next(p for p in pods if holder.startswith(p["metadata"]["name"] + "_"))
    standby = next(p for p in pods if p is not leader)
    try:
        wait_until(lambda: "standing by: lease" in fleet.log(standby), 30, "standby logs")
    except TimeoutError:
        raise AssertionError(fleet.log(standby)[-3000:] + fleet.log(leader)[-3000:]) from None
    assert "edgetrain operator: namespaces=" not in fleet.log(standby)  # kopf never started
    assert f"edgetrain operator: namespaces=['{fleet.ns}']" in fleet.log(leader)
    assert f"leader={holder}" in fleet.log(leader)


def test_operator_leader_sigkilled_in_every_phase(fleet: Fleet) -> None:
    """kill -9 the acting replica in each phase of one job: the standby takes over within the
    lease duration, the killed container restarts as the new standby, and the job finishes
    with one estimate, one profile and one training run (nothing repeated, nothing lost).
    In Training the node agent holding the pod's frequency pin is killed as well."""
    name = "walk"
    kills: list[FaultRecord] = []

    def kill(when: str, then: Callable[[], object] = lambda: None) -> None:
        who, at = fleet.kill_leader()
        then()
        phase = fleet.status(name).get("phase") or "Pending"
        took = fleet.wait_new_holder(who, at)
        kills.append(record(FaultRecord(f"operator leader SIGKILL ({when})", name, phase,
                                        round(took, 1), detail=f"killed {who}; recover: a"
                                        " standby holds the Lease")))

    transitions = int(fleet.lease()["spec"].get("leaseTransitions") or 0)
    # The acting replica dies and the job is created at once: it is Pending until a standby
    # has taken over (a kill after the create would race with its first reconcile). The
    # estimate and the training pause at their first progress line until released, so the
    # kills in those phases land there, not after a workload that finished in the meantime.
    kill("Pending", lambda: fleet.create(name, hold=("estimate", "train")))
    fleet.wait_phase(name, "EstimatingEfficiency",
                     lambda: bool(fleet.objects("batch/v1", "jobs", f"edgetrain.io/job={name}")),
                     " in a Job")
    kill("EstimatingEfficiency")
    fleet.release_hold(name, "estimate")
    # Profiling is not held (a pause would enter its timings): the kill lands where it is.
    fleet.wait_phase(name, "Profiling",
                     lambda: bool(fleet.objects("apps/v1", "daemonsets",
                                                f"edgetrain.io/job={name}")),
                     " in a DaemonSet")
    kill("Profiling")
    # Selecting is not a resting phase: one reconcile goes Profiling → Selecting → Training
    # once the profile is there. The kill closest to it: when the profile lands (it stays).
    wait_until(lambda: fleet.objects("v1", "configmaps", "edgetrain.io/cache=profile"), 300,
               "the profile ConfigMap", interval_s=0.2)
    kill("profile landed (Selecting)")
    status = fleet.wait_training(name)
    pin = _kill_pinning_agent(fleet, name, status)
    kill("Training")
    fleet.release_hold(name, "train")
    final = fleet.wait_done(name)
    for rec in [*kills, pin]:
        rec.final_phase, rec.lost_samples = final.get("phase"), 0
    assert final["phase"] == "Succeeded", final
    # Nothing was done twice: one estimate Job, one training Job (attempt 1, never
    # restarted: the operator's death does not touch running pods), and nothing lost: exactly
    # one Event of each phase's start and transition (named by the job's uid and a key from
    # its status, carried by the status write's ledger and posted after it, by the replica
    # that wrote it or the one that took over; docs/operator.md).
    once = ("Started", "EstimateStarted", "EfficiencyReady", "ProfilingStarted",
            "ProfilesReady", "Planned", "TrainingStarted", "TargetReached")
    # A training pod the emulator crashed is retried as a new attempt (its own Job and start
    # Event): those are the emulator's, counted apart; no kill may add one.
    crashed = fleet.emulator_crashes(name).get("train", 0)
    reasons = fleet.reasons(name, once)
    for reason in once:
        want = 1 + crashed if reason == "TrainingStarted" else 1
        assert reasons.count(reason) == want, (reason, reasons, crashed)
    jobs = fleet.objects("batch/v1", "jobs", f"edgetrain.io/job={name}")
    assert sorted(j["metadata"]["name"] for j in jobs) == [f"{name}-estimate-0"] + [
        f"{name}-train-{a}" for a in range(1, 2 + crashed)], crashed
    training = final["training"]
    assert training["attempt"] == 1 + crashed and not training.get("nodesLost"), training
    assert fleet.resumed_from(name) == 0
    assert int(fleet.lease()["spec"]["leaseTransitions"]) >= transitions + len(kills)
    for rec in kills:
        assert rec.recover_s is not None and rec.recover_s <= TAKEOVER_MAX_S, rec
    # The killed containers came back (restartPolicy) and stand by.
    pods = fleet.operator_pods()
    assert sum(int(cs["restartCount"]) for p in pods
               for cs in p["status"]["containerStatuses"]) >= len(kills)
    # The agent restored the board's range when the training pod ended.
    node = status["selection"]["node"]
    dev, state_file = fleet.devfreq(node), fleet.state_file(node)
    table = dev.available_frequencies_hz()
    try:
        wait_until(lambda: _range(dev) == (min(table), max(table))
                   and not load_state(state_file).holding, 30,
                   "the board's range restored after the job")
    except TimeoutError:
        pin.pins_leaked = 1
        raise


def _range(dev: Any) -> tuple[int, int]:
    r = dev.current_range()
    return (r.min_freq_hz, r.max_freq_hz)


def _kill_pinning_agent(fleet: Fleet, name: str, status: dict[str, Any]) -> FaultRecord:
    """kill -9 the node agent while it pins the training pod's frequency: the restarted agent
    is Ready again and holds the same pin over the board's original range (its state file)."""
    node, freq = status["selection"]["node"], int(status["selection"]["gpuFrequencyHz"])
    dev = fleet.devfreq(node)
    table = dev.available_frequencies_hz()
    wait_until(lambda: _range(dev) == (freq, freq), 30, f"pin at {freq} Hz on {node}")
    (agent,) = fleet.kube.get(api_path("v1", "pods", fleet.agent_ns),
                              fieldSelector=f"spec.nodeName={node}",
                              labelSelector="app.kubernetes.io/component=node-agent")["items"]
    restarts = int(agent["status"]["containerStatuses"][0]["restartCount"])
    state_file = fleet.state_file(node)
    assert load_state(state_file).holding
    fleet.kill(agent)
    at = time.monotonic()
    path = api_path("v1", "pods", fleet.agent_ns, agent["metadata"]["name"])

    def back() -> bool:
        pod = fleet.kube.get(path)
        cs = pod["status"]["containerStatuses"][0]
        return int(cs["restartCount"]) > restarts and pod_ready(pod)

    wait_until(back, 60, "node agent restarted and Ready", interval_s=0.2)
    rec = record(FaultRecord("node agent SIGKILL holding a pin", name,
                             fleet.status(name).get("phase"), round(time.monotonic() - at, 1),
                             detail=f"{node} pinned at {freq / 1e6:g} MHz; recover: agent Ready"
                             " again, pin held"))
    if fleet.status(name).get("phase") == "Training":  # still pinned, by the new agent
        assert _range(dev) == (freq, freq)
        state = load_state(state_file)
        assert state.holding and (state.saved_min_hz, state.saved_max_hz) == (
            min(table), max(table)), state
    return rec


def _last_checkpoint(fleet: Fleet, node: str, train_job: str) -> int:
    """The last checkpoint the lost node's training pod wrote (its progress lines)."""
    return max((e.samples for e in fleet.train_progress(node, train_job)
                if e.event == "progress"), default=0)


def _power_off(fleet: Fleet, node: str, delete: bool) -> None:
    """The node loses power: its kubelet, containerd and containers die at once (SIGKILL),
    then it is silent (no more heartbeats: NotReady after the controller's grace period) or
    its Node is deleted."""
    fleet.power_off(node)
    if delete:
        fleet.kube.delete_ignore_missing(api_path("v1", "nodes", name=node))


def test_node_losses_api_restart_and_token_rotation(fleet: Fleet) -> None:
    """Two jobs train on two nodes; one node is deleted, the other loses power (NotReady after
    the node controller's grace period). While they wait and move, kube-apiserver restarts and
    the operator's token is revoked and rotated; a job created after each of those is picked
    up. Both training jobs finish on other nodes, resumed from their last checkpoints."""
    # NotReady first: its grace period runs while the second job starts. One after the
    # other, so the second is placed knowing the first's node (its Job still counts there).
    cases = {"down": False, "gone": True}  # job → delete the Node
    nodes: dict[str, str] = {}
    # The training Job on the lost node: train-1, or train-2 when the emulator crashed the
    # first one's pod before it reached its checkpoint.
    lost_jobs: dict[str, str] = {}
    recs: dict[str, FaultRecord] = {}
    at: dict[str, float] = {}
    for name, delete in cases.items():
        fleet.create(name, hold=("train",))
        status = fleet.wait_training(name)
        nodes[name], lost_jobs[name] = status["selection"]["node"], status["training"]["job"]
        at[name] = time.monotonic()
        _power_off(fleet, nodes[name], delete)
        fleet.release_hold(name, "train")  # the next attempt, on another node, trains through
        recs[name] = record(FaultRecord(
            f"training node {'deleted' if delete else 'NotReady (power lost)'}", name,
            "Training", detail=f"{nodes[name]}; {status['training']['samples']} samples seen"
            " before; recover: training again on another node"))
    assert len(set(nodes.values())) == 2, nodes  # idle nodes first: one job per node
    _restart_api_server(fleet)
    _rotate_operator_token(fleet)
    for name in cases:
        moved = fleet.wait(name, lambda s, n=name: nodes[n] in ((s.get("training") or {})
                                                                 .get("nodesLost") or [])
                           and s.get("phase") in ("Training", "Succeeded"),
                           "rescheduled", timeout_s=420)
        recs[name].recover_s = round(time.monotonic() - at[name], 1)
        assert moved["selection"]["node"] != nodes[name]
    for name in cases:
        final = fleet.wait_done(name, timeout_s=900)  # both may now share one node
        recs[name].final_phase = final["phase"]
        assert final["phase"] == "Succeeded", final
        # Moved once, and neither the API restart nor the token rotation restarted training.
        assert final["training"]["nodesLost"] == [nodes[name]]
        # Attempt 2 on the next node; one more for each training pod the emulator crashed.
        want = 2 + fleet.emulator_crashes(name).get("train", 0)
        if final["training"]["attempt"] != want:  # in full: pytest cuts a long repr
            events = "\n".join(f"  {e.get('lastTimestamp') or e.get('eventTime')} {e['reason']}:"
                               f" {e.get('message', '')}" for e in fleet.events(name))
            pytest.fail(f"{name}: attempt {final['training']['attempt']}, not {want}\n"
                        f"training: {final['training']}\nevents:\n{events}\n"
                        f"{fleet.diagnose()}", pytrace=False)
        assert "NodeLost" in fleet.reasons(name, ("NodeLost",))
        # Resumed from the last checkpoint the lost pod wrote: what was lost is the steps
        # after it, less than one checkpoint interval.
        checkpoint = _last_checkpoint(fleet, nodes[name], lost_jobs[name])
        resumed = fleet.resumed_from(name)
        recs[name].lost_samples = checkpoint - resumed
        assert checkpoint > 0 and resumed == checkpoint, (checkpoint, resumed)
        assert final["training"]["samples"] >= resumed


def _probe(fleet: Fleet, name: str) -> dict[str, Any]:
    """A job the API server accepts but the operator refuses at Pending (a text model on an
    image data set): the operator must see it (a create event on its watch) and write its
    status (its credentials work); no pod runs."""
    fleet.create(name, model={"architecture": "charformer"})
    status = fleet.wait_done(name, timeout_s=120)
    assert (status["phase"], status["reason"]) == ("Failed", "BadInput"), status
    return status


def _restart_api_server(fleet: Fleet) -> None:
    """Restart kube-apiserver: watches and clients recover; a job created afterwards is seen."""
    at = time.monotonic()
    down_s = fleet.cluster.restart("kube-apiserver")
    _probe(fleet, "after-restart")
    record(FaultRecord("kube-apiserver restarted", "after-restart", "Pending",
                       round(time.monotonic() - at, 1), "Failed", expected_phase="Failed",
                       detail=f"API down {down_s:.1f} s while gone/down moved; recover: a job"
                       " created after the restart is seen, its status written (BadInput)"))


def _token_file(fleet: Fleet, pod: dict[str, Any]) -> Path:
    """The operator pod's projected ServiceAccount token, as its kubelet wrote it (in the
    node's mount namespace). Read through `..data`, the kubelet's root-owned link to its
    latest write: `token` is a link owned by the pod's user in a sticky, world-writable folder,
    which fs.protected_symlinks forbids root to follow (EACCES)."""
    meta = pod["metadata"]
    vol = next(v["name"] for v in pod["spec"]["volumes"]
               if any("serviceAccountToken" in s for s in (v.get("projected") or {})
                      .get("sources", [])))
    return fleet.pod_file(pod, f"/var/lib/kubelet/pods/{meta['uid']}/volumes/"
                          f"kubernetes.io~projected/{vol}/..data/token")


def _status_with(fleet: Fleet, token: str) -> int:
    """HTTP status of GET /api with a bearer token."""
    ctx = ssl.create_default_context(cafile=str(fleet.cluster.pki.ca_crt))
    req = urllib.request.Request(f"{fleet.cluster.server}/api",
                                 headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _rotate_operator_token(fleet: Fleet) -> None:
    """Revoke the operator's token (its ServiceAccount recreated) and rotate the token files
    as the kubelet does: both replicas go on with the new token, without a restart."""
    # A replica the API server's restart made exit (a holder that could not renew) is back.
    wait_until(lambda: len(pods := fleet.operator_pods()) == 2 and all(pod_ready(p) for p in pods),
               180, "both operator replicas Ready", interval_s=0.5)
    pods = fleet.operator_pods()
    restarts = {p["metadata"]["name"]: int(p["status"]["containerStatuses"][0]["restartCount"])
                for p in pods}
    holder = (fleet.holder() or "").rsplit("_", 1)[0]
    files = {p["metadata"]["name"]: _token_file(fleet, p) for p in pods}
    old = {n: f.read_text() for n, f in files.items()}
    assert all(_status_with(fleet, t) == 200 for t in old.values())
    sa_name = pods[0]["spec"]["serviceAccountName"]
    sa_path = api_path("v1", "serviceaccounts", fleet.ns, sa_name)
    sa = fleet.kube.get(sa_path)
    meta = {k: sa["metadata"][k] for k in ("name", "namespace", "labels", "annotations")
            if k in sa["metadata"]}
    fleet.kube.delete(sa_path)
    at = time.monotonic()
    fleet.kube.create(api_path("v1", "serviceaccounts", fleet.ns),
                      {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})
    for pod_name in files:
        assert fleet.rotate_tokens(pod_name)
    # A restarted kubelet writes its pods' projected volumes again at its first sync.
    wait_until(lambda: all(f.read_text() != old[n] for n, f in files.items()), 60,
               "token files rotated")
    # The old tokens are refused now (the API server caches a token's check for 10 s).
    wait_until(lambda: all(_status_with(fleet, t) == 401 for t in old.values()), 30,
               "old tokens refused", interval_s=0.5)
    _probe(fleet, "after-rotation")
    record(FaultRecord("ServiceAccount token revoked and rotated", "after-rotation",
                       "Pending", round(time.monotonic() - at, 1), "Failed",
                       expected_phase="Failed",
                       detail="while gone/down moved; recover: with only the new token valid,"
                       " a new job is seen and its status written (BadInput)"))
    after = {p["metadata"]["name"]: int(p["status"]["containerStatuses"][0]["restartCount"])
             for p in fleet.operator_pods()}
    # The standby re-reads the new token, no restart. The holder stops acting (exits) when it
    # cannot renew for its renew deadline (5 s here), and on real nodes the old token is
    # refused until its kubelet, restarted, writes the new one: it may have stepped down once.
    assert all(after[n] == restarts[n] for n in after if n != holder), (holder, restarts, after)
    assert after.get(holder, 0) - restarts.get(holder, 0) <= 1, (holder, restarts, after)

# Issue 31: a job whose worker cannot start says why within 30 s of its creation.
SAY_WHY_S = 30
WORKER_START_DEADLINE_S = 15


def test_a_worker_that_cannot_start_says_why_then_fails(fleet: Fleet) -> None:
    """Four jobs at once, each with a worker that cannot start for its own cause (admission,
    quota, no node that fits, a missing image; tests/faults/causes.py). Each says why within
    30 s of its creation, by the timestamps the API server and the operator wrote: the cause
    in a WorkerBlocked condition and a Warning Event. After spec.workerStartDeadlineSeconds it
    is Failed with that cause and Kubernetes' words."""
    fleet.warm_caches()  # three of the four go straight to training, where they are stopped
    with blocked_workers(fleet) as cases:
        for case in cases:
            fleet.create(case.job, workerStartDeadlineSeconds=WORKER_START_DEADLINE_S,
                         **case.spec)
        for case in cases:
            final = fleet.wait_done(case.job, timeout_s=180)
            created = unix_seconds(fleet.kube.get(patj_path(fleet.ns, case.job))
                                   ["metadata"]["creationTimestamp"])
            said = said_at(fleet, case.job, case.cause, final)
            rec = record(FaultRecord(
                f"worker blocked: {case.cause}", case.job, expected_phase="Failed",
                final_phase=final.get("phase"), detail=f"{case.how}; recover: the reason in"
                " status and a Warning Event (s from the job's creation)",
                recover_s=None if said is None or created is None else round(said - created, 1)))
            assert (final["phase"], final.get("reason")) == ("Failed", case.cause), final
            for words in (*case.words, "workerStartDeadlineSeconds is"
                          f" {WORKER_START_DEADLINE_S} s"):
                assert words in final["message"], (words, final["message"])
            assert rec.recover_s is not None and rec.recover_s <= SAY_WHY_S, (
                rec, final.get("conditions"), fleet.events(case.job))
            # Its worker is gone: lifting the cause (below) must not start a failed job's pod.
            wait_until(lambda j=case.job: not fleet.objects("batch/v1", "jobs",
                                                            f"edgetrain.io/job={j}"),
                       30, f"{case.job}'s worker deleted", interval_s=0.5)


SITE_CAP_W = 9.0
# The site's jobs: JOB on a data set of their own size, so their profile's key is their own.
SITE_DATASET = {"dataset": {"name": "digits", "limit": 1600}}


def test_three_jobs_share_a_site_budget(fleet: Fleet) -> None:
    """Issue 29 through the chart: three Nanos of one site (with the chart's node agents)
    under a 9 W PowerBudget, three jobs at 5 W each. Two train under 9 W, one above its
    cheapest point (the third node is free); held at their first checkpoint, the cap is
    lowered to what fits the two at their cheapest: they re-plan (PowerLimitChanged). The
    third job cannot fit and waits in WaitingForPower naming the budget, then runs once the
    two finish. All three succeed; the budget's planned draw, sampled every 0.2 s, never
    passes the cap (after the lowering it only falls until it is within the new cap)."""
    site = f"{fleet.pool}-site"
    names = ["site-1", "site-2", "site-3"]
    spec = {"placement": {"nodeSelector": {"edgetrain.io/site": site}}, **SITE_DATASET}
    nodes = fleet.add_nanos("site", 3, agents=True)
    # A profile of their own, seeded: the walk's was measured on a twin as starved as the
    # machine (its cheapest point once read 1.86 W, near the Nano's idle draw, and then the
    # 9-W cap left no point above it); profiling and its faults are the walk's to test. The
    # efficiency vector's key names the proxy set only: the walk's, where it ran, is kept.
    site_spec = fleet.manifest("site", **spec)["spec"]
    seed_efficiency(fleet.kube, fleet.ns, site_spec, (2048.0,))
    seed_profile(fleet.kube, fleet.ns, site_spec, nodes[0])
    create_budget(fleet.kube, site, {"edgetrain.io/site": site}, SITE_CAP_W)
    try:
        st = fleet.kube.wait_for(budget_path(site), lambda b: len(
            (b.get("status") or {}).get("nodes") or []) == 3, timeout_s=60, interval_s=0.5,
            what="the budget sees its 3 nodes")["status"]
        idle_per_node = st["idleWatts"] / 3
        # From outside too: every pod watched, per node its highest power limit (else idle).
        with BudgetWatch(fleet.kube, site, fleet.ns) as watch, \
                AuthorisedWatch(fleet.kube, {n: idle_per_node for n in nodes}) as pods:
            for name in names[:2]:
                fleet.create(name, hold=("train",), **spec)
            for name in names[:2]:
                fleet.wait_training(name)
            held = wait_until(lambda: _on_their_shares(fleet, site, names[:2]), 120,
                              "both training on the shares the budget shows", interval_s=0.5)
            p_min = site_options(fleet.kube, fleet.ns, held[names[0]], names[0]).min_power_w
            limits = {n: s["selection"]["powerLimitWatts"] for n, s in held.items()}
            above = [n for n, w in limits.items() if w > p_min + 0.05]
            assert above, (limits, p_min)  # 9 W leaves room above the cheapest point
            # Never under the site's idle draw (CapBelowIdle).
            lowered = round(max(2 * p_min + idle_per_node, 3 * idle_per_node) + 0.05, 3)
            lowered_at = time.time()
            set_cap(fleet.kube, site, lowered)
            for name in names[:2]:
                fleet.wait(name, lambda s: (s.get("phase") == "Training" and (
                    s.get("selection") or {}).get("powerLimitWatts", 99) <= p_min + 0.05)
                    or s.get("phase") in ("Succeeded", "Failed"), "re-planned under the"
                    " lowered cap")
            for name in above:
                assert "PowerLimitChanged" in fleet.reasons(name, ("PowerLimitChanged",)), (
                    name, fleet.reasons(name))
            fleet.create(names[2], **spec)
            waiting = fleet.wait(names[2], lambda s: s.get("phase") not in (
                None, "Pending", "EstimatingEfficiency", "Profiling", "Selecting"), "waiting")
            assert waiting["phase"] == "WaitingForPower", waiting  # the two hold its power
            assert f"PowerBudget {site}" in waiting["message"], waiting
            for name in names[:2]:
                fleet.release_hold(name, "train")
            # A busy machine trains slowly: no hurry here.
            finals = {n: fleet.wait_done(n, timeout_s=900) for n in names}
        assert all(f["phase"] == "Succeeded" for f in finals.values()), finals
        assert watch.samples and not watch.over_cap(), (watch.over_cap()[:5],
                                                        watch.around_first_over_cap())
        assert max(p for _t, _cap, p, _ in watch.samples) <= SITE_CAP_W + 1e-6
        after = [p for _t, cap, p, _ in watch.samples if cap == lowered]
        within = next((i for i, p in enumerate(after) if p <= lowered + 1e-6), len(after))
        assert after and within < len(after), after[:20]
        assert all(a >= b - 1e-6 for a, b in itertools.pairwise(after[:within + 1])), after
        assert all(p <= lowered + 1e-6 for p in after[within:]), after
        # The pods' limits: never over 9 W, and down within the lowered cap after it (between,
        # a job re-planned first may start its new pod while the other's old one still runs:
        # both under the 9 W they were granted together); all gone at the end.
        assert pods.samples and pods.max_w <= SITE_CAP_W + 1e-6, pods.over(SITE_CAP_W)[:3]
        later = [w for t, w, _n in pods.samples if t >= lowered_at]
        assert any(w <= lowered + 1e-6 for w in later), later
        assert pods.samples[-1][1] == pytest.approx(3 * idle_per_node), pods.samples[-1]
        record(FaultRecord("site budget lowered mid-training", above[0], "Training",
                           final_phase="Succeeded", detail=f"cap {SITE_CAP_W:g} → {lowered:g} W"
                           f" over 3 Nanos; {', '.join(above)} re-planned (PowerLimitChanged),"
                           f" {names[2]} waited for power, then ran"))
    finally:
        fleet.kube.delete_ignore_missing(budget_path(site))
        fleet.remove_extra()


def _on_their_shares(fleet: Fleet, budget: str, names: list[str]
                     ) -> dict[str, dict[str, Any]] | None:
    """Each job's status once it trains past a checkpoint at the limit of the share the
    budget shows for it (min(own 5 W, share)); None before."""
    shares = {a["name"]: a.get("watts") for a in (get_budget(fleet.kube, budget).get(
        "status") or {}).get("allocations") or []}
    statuses = {n: fleet.status(n) for n in names}
    for name, st in statuses.items():
        share = shares.get(name)
        if not training_with_samples(st) or share is None or abs(
                st["selection"]["powerLimitWatts"] - min(5.0, share)) > 1e-3:
            return None
    return statuses


def test_no_job_lost_and_no_pin_leaked(fleet: Fleet) -> None:
    """Every job of the suite ended as it should (Succeeded, but for the probes and the
    blocked workers, which fail on purpose); every live node is back at the board's full
    range."""
    jobs = fleet.kube.get(patj_path(fleet.ns))["items"]
    expected = {r.job: r.expected_phase for r in SUMMARY if r.job}
    phases = {j["metadata"]["name"]: (j.get("status") or {}).get("phase") for j in jobs}
    wrong = {n: p for n, p in phases.items() if p != expected.get(n, "Succeeded")}
    for name in phases:
        fleet.emulator_crashes(name)  # for the summary's count
    assert phases and not wrong, (wrong, phases)
    leaked = []
    for node in fleet.pool_nodes():
        if node in fleet.stopped:
            continue
        dev = fleet.devfreq(node)
        table = dev.available_frequencies_hz()
        r = dev.current_range()
        if (r.min_freq_hz, r.max_freq_hz) != (min(table), max(table)):
            leaked.append(node)
    assert not leaked, leaked
    print("\n" + json.dumps([r.__dict__ for r in SUMMARY], indent=1))
    assert max((r.lost_samples or 0) for r in SUMMARY) < CHECKPOINT_INTERVAL
