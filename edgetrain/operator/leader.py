"""Leader election on a coordination.k8s.io Lease, so that one of several operator replicas acts.

kopf has no leader election (its peering pauses lower-priority peers, but peers of the same
priority all act), so the operator holds a Lease before it starts kopf, the way client-go's
leaderelection does: a candidate takes the Lease when nobody renewed it for its
`leaseDurationSeconds`, the holder renews it every retry period and stops acting (the process
exits) when it could not renew for the renew deadline, and a holder that stops cleanly releases
it. Expiry is judged by the candidate's own clock from when it last saw the record change (not
from `renewTime`), so clock skew between nodes cannot make two holders. Every write is a
compare-and-swap on the Lease's resourceVersion, so two standbys cannot both take it.
"""

from __future__ import annotations

import enum
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path, now_micro

log = logging.getLogger("edgetrain.operator.leader")


@dataclass(frozen=True)
class LeaseTiming:
    """client-go's three durations (defaults are client-go's: 15, 10, 2 s)."""

    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        # The holder must give up before a standby may take over, with room for one retry.
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                "leader election needs retry period < renew deadline < lease duration, got "
                f"{self.retry_period_s:g} s, {self.renew_deadline_s:g} s, "
                f"{self.lease_duration_s:g} s")


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec as the election reads it, and the object version it came from."""

    holder: str = ""
    lease_duration_s: float = 0.0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0
    resource_version: str = ""

    @classmethod
    def from_lease(cls, lease: Obj) -> LeaseRecord:
        """Parse a Lease object (missing fields read as empty)."""
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration_s=float(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str((lease.get("metadata") or {}).get("resourceVersion") or ""),
        )

    @property
    def seen(self) -> tuple[str, str | None, float]:
        """What changes on every renewal: a change means the holder is alive."""
        return (self.holder, self.renew_time, self.lease_duration_s)


class Action(enum.Enum):
    """What a candidate does with the Lease it just read."""

    create = "create"  # no Lease yet: create it, holding it
    renew = "renew"  # we hold it: write a new renewTime
    take = "take"  # free or expired: write ourselves as holder
    wait = "wait"  # someone else holds it and renews it


def decide(record: LeaseRecord | None, identity: str, observed_at_s: float | None,
           now_s: float) -> Action:
    """The election's one decision (pure): `observed_at_s` is when this candidate last saw the
    record change, on its own monotonic clock."""
    if record is None:
        return Action.create
    if record.holder == identity:
        return Action.renew
    if not record.holder:
        return Action.take  # released by a holder that stopped cleanly
    if observed_at_s is None:
        return Action.wait  # first sight: the holder may have renewed just now
    if now_s >= observed_at_s + record.lease_duration_s:
        return Action.take
    return Action.wait


def lease_spec(action: Action, record: LeaseRecord | None, identity: str,
               timing: LeaseTiming) -> Obj:
    """The spec to write for `action` (create, renew or take)."""
    now = now_micro()
    duration = max(1, round(timing.lease_duration_s))
    if action is Action.renew and record is not None:
        return {"holderIdentity": identity, "leaseDurationSeconds": duration,
                "acquireTime": record.acquire_time or now, "renewTime": now,
                "leaseTransitions": record.transitions}
    transitions = 0 if record is None else record.transitions + (1 if record.holder else 0)
    return {"holderIdentity": identity, "leaseDurationSeconds": duration, "acquireTime": now,
            "renewTime": now, "leaseTransitions": transitions}


def default_identity(pod_name: str | None = None) -> str:
    """<pod or host name>_<8 hex>: unique per process, so a restarted container is a new
    candidate and never mistakes the Lease of its dead predecessor for its own."""
    return f"{pod_name or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


@dataclass
class LeaderElector:
    """Acquire, renew and release one Lease through the API."""

    client: KubeClient
    namespace: str
    name: str
    identity: str
    timing: LeaseTiming = field(default_factory=LeaseTiming)
    _seen: tuple[str, str | None, float] | None = None
    _observed_at_s: float | None = None
    _record: LeaseRecord | None = None
    _last_renew_s: float = 0.0

    @property
    def path(self) -> str:
        """REST path of the Lease."""
        return api_path("coordination.k8s.io/v1", "leases", self.namespace, self.name)

    def _read(self) -> LeaseRecord | None:
        lease = self.client.get_or_none(self.path)
        record = None if lease is None else LeaseRecord.from_lease(lease)
        now = time.monotonic()
        key = None if record is None else record.seen
        if key != self._seen or self._observed_at_s is None:
            self._seen, self._observed_at_s = key, now
        self._record = record
        return record

    def try_acquire_or_renew(self) -> bool:
        """One round: read, decide, write. True if we hold the Lease afterwards."""
        try:
            record = self._read()
            action = decide(record, self.identity, self._observed_at_s, time.monotonic())
            if action is Action.wait:
                return False
            spec = lease_spec(action, record, self.identity, self.timing)
            if action is Action.create:
                self.client.create(
                    api_path("coordination.k8s.io/v1", "leases", self.namespace),
                    {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": self.name, "namespace": self.namespace},
                     "spec": spec})
            else:
                assert record is not None
                # PUT with the resourceVersion read: a concurrent writer makes this a 409.
                self.client.replace(self.path, {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace,
                                 "resourceVersion": record.resource_version},
                    "spec": spec})
            if action is not Action.renew:
                log.info("%s acquired lease %s/%s (previous holder %r)", self.identity,
                         self.namespace, self.name, record.holder if record else None)
            return True
        except KubeApiError as exc:
            if exc.code != 409:  # 409: another candidate wrote first; just read again
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return False

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this candidate holds the Lease (True) or `stop` is set (False)."""
        logged = ""
        while not stop.is_set():
            started_s = time.monotonic()
            if self.try_acquire_or_renew():
                self._last_renew_s = started_s
                return True
            holder = self._record.holder if self._record else ""
            if holder and holder != logged:
                log.info("standing by: lease %s/%s is held by %s", self.namespace, self.name,
                         holder)
                logged = holder
            stop.wait(self.timing.retry_period_s)
        return False

    def renew_until_lost(self, stop: threading.Event) -> bool:
        """Renew every retry period until `stop` (True) or until no renewal succeeded for the
        renew deadline, or another holder appears (False: the caller must stop acting)."""
        while not stop.wait(self.timing.retry_period_s):
            started_s = time.monotonic()  # the renewTime written is no older than this
            if self.try_acquire_or_renew():
                self._last_renew_s = started_s
                continue
            if self._record is not None and self._record.holder not in ("", self.identity):
                log.error("lease %s/%s taken over by %s", self.namespace, self.name,
                          self._record.holder)
                return False
            if self.overdue():
                return False
        return True

    def overdue(self) -> bool:
        """No renewal succeeded for the renew deadline: a standby may soon take over."""
        return time.monotonic() - self._last_renew_s >= self.timing.renew_deadline_s

    def release(self) -> None:
        """Give the Lease up (a clean stop): a standby takes it at its next retry."""
        try:
            record = self._read()
            if record is None or record.holder != self.identity:
                return
            self.client.replace(self.path, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "resourceVersion": record.resource_version},
                "spec": {"holderIdentity": None, "leaseDurationSeconds": 1,
                         "acquireTime": record.acquire_time, "renewTime": now_micro(),
                         "leaseTransitions": record.transitions}})
            log.info("%s released lease %s/%s", self.identity, self.namespace, self.name)
        except KubeApiError as exc:
            log.warning("lease %s/%s not released: %s", self.namespace, self.name, exc)

    def keep(self, stop: threading.Event, on_lost: Callable[[], None]) -> None:
        """Renew in a daemon thread and call `on_lost` once if leadership is lost before
        `stop`. A watchdog thread checks the deadline, so a request hanging in the renew
        thread cannot delay the holder's stop past the point where a standby may take over."""
        lost = threading.Event()

        def renew() -> None:
            if not self.renew_until_lost(stop):
                lost.set()

        def watchdog() -> None:
            while not stop.wait(0.25):
                if lost.is_set() or self.overdue():
                    log.error("%s lost lease %s/%s: stopping", self.identity, self.namespace,
                              self.name)
                    on_lost()
                    return

        threading.Thread(target=renew, name="lease-renew", daemon=True).start()
        threading.Thread(target=watchdog, name="lease-watchdog", daemon=True).start()
