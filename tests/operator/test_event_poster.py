"""Keyed Events off the critical path (`operator/events.py`): the ledger a status write carries,
and the poster that sends them after it, in order, once, retrying through outages."""

from __future__ import annotations

import threading
import time
from typing import Any

from edgetrain.api.job_status import PendingEvent
from edgetrain.kube import KubeApiError, KubeClient, Obj
from edgetrain.operator import events as ev
from edgetrain.operator import world as wd

JOB = {"metadata": {"name": "j", "namespace": "ns", "uid": "uid-j"}}


def entry(key: str, reason: str = "R") -> PendingEvent:
    return PendingEvent(key=key, type="Normal", reason=reason, message=f"m {key}")


class Server(KubeClient):
    """Event POSTs as the API server answers them: 409 for a name it has, and outages."""

    def __init__(self, outages: int = 0) -> None:
        self.names: list[str] = []
        self.reasons: list[str] = []
        self.outages = outages
        self.lock = threading.Lock()

    def create(self, path: str, body: Obj, **params: Any) -> Obj:
        with self.lock:
            if self.outages:
                self.outages -= 1
                raise KubeApiError("POST", path, 503, "ServiceUnavailable", "restarting")
            if body["metadata"]["name"] in self.names:
                raise KubeApiError("POST", path, 409, "AlreadyExists", "exists")
            self.names.append(body["metadata"]["name"])
            self.reasons.append(body["reason"])
            return body


def wait_idle(poster: ev.EventPoster, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not poster.idle():
        assert time.monotonic() < deadline, "the poster did not finish"
        time.sleep(0.01)


def test_the_ledger_keeps_what_is_not_seen_posted_and_adds_the_new() -> None:
    held = [entry("t1-Started"), entry("t1-estimate-0")]
    new = [entry("t2-EfficiencyReady"), entry("t1-estimate-0", "again")]
    got = ev.ledger(held, new, posted={"t1-Started"})
    assert [(e.key, e.reason) for e in got] == [("t1-estimate-0", "R"),
                                                ("t2-EfficiencyReady", "R")]
    many = [entry(f"t{i}-X") for i in range(40)]
    assert [e.key for e in ev.ledger([], many, set())][-1] == "t39-X"
    assert len(ev.ledger([], many, set())) == 32  # the newest MAX_PENDING_EVENTS
    unkeyed = [wd.PostEvent("Warning", "TrainFailed", "x"), wd.PostEvent("Normal", "A", "y", "k")]
    assert [e.key for e in ev.pending(unkeyed)] == ["k"]  # kopf posts the unkeyed ones


def test_a_batch_is_posted_after_its_delay_in_order_once_through_an_outage() -> None:
    server = Server(outages=2)
    poster = ev.EventPoster(server, batch_s=0.2)
    submitted = time.monotonic()
    poster.submit(JOB, [entry("t1-Started", "Started"), entry("t1-estimate-0", "Estimate")])
    poster.submit(JOB, [entry("t2-EfficiencyReady", "EfficiencyReady")])
    time.sleep(0.05)
    assert server.reasons == []  # not in between the decisive writes of a burst
    wait_idle(poster)
    assert time.monotonic() - submitted >= 0.2
    assert server.reasons == ["Started", "Estimate", "EfficiencyReady"]
    assert poster.posted("uid-j") == {"t1-Started", "t1-estimate-0", "t2-EfficiencyReady"}
    # A replica that takes over posts its predecessor's ledger: what exists is a 409, kept.
    other = ev.EventPoster(server, batch_s=0.0)
    other.submit(JOB, [entry("t1-Started", "Started"), entry("t3-ProfilesReady", "Profiles")])
    wait_idle(other)
    assert server.reasons == ["Started", "Estimate", "EfficiencyReady", "Profiles"]
    assert other.posted("uid-j") == {"t1-Started", "t3-ProfilesReady"}
    other.submit(JOB, [entry("t1-Started")])  # known to exist: nothing is sent
    wait_idle(other)
    assert len(server.names) == 4
