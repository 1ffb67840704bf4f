"""The informers' stores: lists, watch events, owners, and what a re-list forgets."""

from __future__ import annotations

from typing import Any

from edgetrain.kube import KubeClient
from edgetrain.operator.informer import Informer, TrainingWatch


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


def test_the_training_view_checks_the_owner_and_wakes_on_a_finished_job() -> None:
    done: list[tuple[str, str]] = []
    watch = TrainingWatch(KubeClient.__new__(KubeClient), ["ns"],
                          on_job_done=lambda ns, uid: done.append((ns, uid)))
    jobs = watch._informers["jobs"]["ns"]
    jobs.replace([_obj("j-train-1", "patj-uid")])
    assert watch.job("ns", "j-train-1", "patj-uid") is not None
    # Same name, another job's (a job deleted and created again under the same name).
    assert watch.job("ns", "j-train-1", "other-uid") is None
    assert watch.job("other-ns", "j-train-1", "patj-uid") is None  # not a watched namespace
    jobs.apply("MODIFIED", _obj("j-train-1", "patj-uid", active=1))
    assert done == []
    jobs.apply("MODIFIED", _obj("j-train-1", "patj-uid", succeeded=1))
    assert done == [("ns", "patj-uid")]
