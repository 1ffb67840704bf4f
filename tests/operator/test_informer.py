"""The informers' stores: lists, watch events, owners, and what a re-list forgets."""

from __future__ import annotations

from typing import Any

from edgetrain.kube import KubeClient
from edgetrain.operator.informer import Informer, OwnWatch


def _obj(name: str, owner: str | None = None, ns: str = "ns", **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"u-{name}",
                            "managedFields": [{"manager": "kube"}]}
    if owner:
        meta["ownerReferences"] = [{"uid": owner, "controller": True}]
    return {"metadata": meta, "status": status}


def test_a_list_replaces_the_store_and_events_update_it() -> None:
    informer = Informer(KubeClient.__new__(KubeClient), "/api/v1/pods", "x=y")  # no API calls
    informer.replace([_obj("p1", "job-a"), _obj("p2", "job-a"), _obj("p3", "job-b")])
    assert informer.listed.is_set() and len(informer) == 3
    assert sorted(p["metadata"]["name"] for p in informer.owned_by("job-a")) == ["p1", "p2"]
    assert "managedFields" not in (informer.get("ns", "p1") or {})["metadata"]
    informer.apply("DELETED", _obj("p2", "job-a"))
    informer.apply("MODIFIED", _obj("p3", "job-b", phase="Running"))
    assert [p["metadata"]["name"] for p in informer.owned_by("job-a")] == ["p1"]
    assert (informer.get("ns", "p3") or {})["status"] == {"phase": "Running"}
    # A re-list after the watch expired: exactly what it lists (p1 was deleted meanwhile).
    informer.replace([_obj("p3", "job-b")])
    assert informer.get("ns", "p1") is None and informer.owned_by("job-a") == []


def _labelled(obj: dict[str, Any], **labels: str) -> dict[str, Any]:
    obj["metadata"]["labels"] = {k.replace("_", "."): v for k, v in labels.items()}
    return obj


def test_the_own_view_checks_the_owner_and_reports_a_finished_job() -> None:
    seen: list[tuple[str, str, str]] = []
    watch = OwnWatch(KubeClient.__new__(KubeClient), ["ns"],
                     on_event=lambda kind, plural, obj, at, old: seen.append(
                         (kind, plural, obj["metadata"]["name"])))
    jobs = watch.informer("jobs", "ns")
    assert jobs is not None and watch.informer("jobs", "other-ns") is None
    jobs.replace([_obj("j-train-1", "patj-uid")])
    assert watch.job("ns", "j-train-1", "patj-uid") is not None
    # Same name, another job's (a job deleted and created again under the same name).
    assert watch.job("ns", "j-train-1", "other-uid") is None
    assert watch.job("other-ns", "j-train-1", "patj-uid") is None  # not a watched namespace
    jobs.apply("MODIFIED", _obj("j-train-1", "patj-uid", succeeded=1))
    assert seen == [("MODIFIED", "jobs", "j-train-1")]


def test_the_indexes_follow_each_event() -> None:
    """Producers (unfinished estimate Jobs, DaemonSets not deleting), training Jobs by node,
    cache entries by name and refusals by workload: what the kopf indexes gave, kept by the
    informers' events."""
    watch = OwnWatch(KubeClient.__new__(KubeClient), ["ns"])
    jobs, ds = watch.informer("jobs", "ns"), watch.informer("daemonsets", "ns")
    cache, events = watch.informer("cache", "ns"), watch.informer("events", "ns")
    assert jobs is not None and ds is not None and cache is not None and events is not None
    est = _labelled(_obj("a-estimate-0", "uid-a"), **{"edgetrain.io/phase": "estimate",
                                                      "edgetrain.io/cache-key": "k1"})
    train = _labelled(_obj("b-train-1", "uid-b"), **{"edgetrain.io/phase": "train"})
    train["spec"] = {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": "n1"}}}}
    jobs.replace([est, train])
    assert [p.owner for p in watch.estimators[("ns", "k1")]] == ["uid-a"]
    assert watch.training["n1"] == ["ns/b-train-1"]
    assert watch.jobs_of("ns", "uid-a", "estimate").keys() == {"a-estimate-0"}
    jobs.apply("MODIFIED", {**est, "status": {"succeeded": 1}})
    jobs.apply("MODIFIED", {**train, "status": {"failed": 1}})
    assert ("ns", "k1") not in watch.estimators and "n1" not in watch.training
    prof = _labelled(_obj("c-profile-nano", "uid-c"), **{"edgetrain.io/cache-key": "k2"})
    ds.replace([prof])
    assert [p.what for p in watch.profilers[("ns", "k2")]] == ["daemonset c-profile-nano"]
    ds.apply("MODIFIED", {**prof, "metadata": {**prof["metadata"],
                                               "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    assert ("ns", "k2") not in watch.profilers
    cache.replace([{**_obj("eff-k1"), "data": {"efficiency.json": "{}"}}])
    assert watch.cache[("ns", "eff-k1")] == [{"efficiency.json": "{}"}]
    assert watch.cached("ns", "eff-k1") == {"efficiency.json": "{}"}
    assert watch.cached("ns", "missing") is None
    refused = {**_obj("ev-1"), "reason": "FailedCreate",
               "involvedObject": {"uid": "u-a-estimate-0"}}
    events.replace([refused])
    assert [e["metadata"]["name"] for e in watch.refusals("ns", "u-a-estimate-0")] == ["ev-1"]
    events.apply("DELETED", refused)
    assert watch.refusals("ns", "u-a-estimate-0") == ()
