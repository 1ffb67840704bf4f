"""The I/O shell around `decide`: gather one job's world (`gather.py`), decide as far as it
allows, carry the actions out.

A reconcile decides first and writes after: each step's world comes from the watches plus what
the earlier steps make (their ConfigMaps), so deciding up to five steps costs no request. Then
it acts, then records, in one of two orders:

- **Act, then record** (no site budget): deletes (in parallel), then the status write, which
  carries the phase as soon as it changed and the ledger of the keyed Events the decisions
  imply (`status.pendingEvents`), then the creates, then best-effort patches. The keyed
  Events are posted after, off the critical path (`events.py`). The decisive write (the phase,
  or the Job or DaemonSet made) is thus the first or second request of a decision.
- **In the order decided** (a site budget exists, or the caller writes the status itself):
  each step's actions in order, keyed Events posted in line before what they announce, a
  worker started under a grant stored with its echo first (`commits_power`), the status last
  (by the caller). The budget's invariant is argued on this order (`docs/operator.md`).

Every action is idempotent: 409 on create and 404 on delete are success, and so is 409 on a
keyed Event (`world.PostEvent`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from edgetrain.api.job_status import Phase, PowerAwareTrainingJobStatus, fit_string
from edgetrain.api.keys import LABEL_CACHE
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path, now_rfc3339
from edgetrain.operator import decide as dc
from edgetrain.operator import decisions
from edgetrain.operator import manifests as mf
from edgetrain.operator import world as wd
from edgetrain.operator.gather import (
    FLEET_SNAPSHOT_S,
    SERVERS_SNAPSHOT_S,
    Gatherer,
    Indexes,
    owned_by,
    uids_of,
)
from edgetrain.operator.settings import OperatorSettings
from edgetrain.operator.worker import RESULT_KEY

__all__ = ["FLEET_SNAPSHOT_S", "SERVERS_SNAPSHOT_S", "Commit", "Indexes", "Reconciler", "Step",
           "Store", "act_then_record", "commits_power", "owned_by", "uids_of"]

log = logging.getLogger("edgetrain.operator")
_WORKLOADS = ("jobs", "daemonsets")
MAX_STEPS = 5


@dataclass
class Step:
    """What one reconcile decided: the status to write, the Events to post, the decisions in
    order (`before`: the status it started from). `conflict`: a power commit met a newer
    object; nothing of that decision was done."""

    status: PowerAwareTrainingJobStatus
    events: list[wd.PostEvent] = field(default_factory=list)
    conflict: bool = False
    decisions: list[wd.Decision] = field(default_factory=list)
    before: PowerAwareTrainingJobStatus | None = None
    # The writes that follow the record, still being sent by `Reconciler.followups` (None:
    # done in the reconcile's own thread); the job's next reconcile waits for them.
    followup: Future[None] | None = None

    @property
    def keyed(self) -> list[wd.PostEvent]:
        """The keyed Events of every decision, in order."""
        return [e for e in self.events if e.key is not None]

    @property
    def phase_changed(self) -> bool:
        """The phase moved in this reconcile."""
        return self.before is not None and self.status.phase is not self.before.phase


# Writes the status as decided so far, on the version the reconcile read; False: the object
# changed since (a new grant, another replica), so the decision must be taken again.
Commit = Callable[[PowerAwareTrainingJobStatus], bool]
# Writes the reconcile's status and the ledger of its keyed Events; False: not written.
Store = Callable[[PowerAwareTrainingJobStatus, list[wd.PostEvent]], bool]


def commits_power(decision: wd.Decision) -> bool:
    """The decision starts a worker under a site budget's grant: its echo of the grant must be
    stored (on the version it was decided from) before the worker exists."""
    return decision.status.power_share is not None and any(
        isinstance(a, wd.Create) and a.plural in _WORKLOADS for a in decision.actions)


def _before_record(action: wd.Action) -> bool:
    """Sent before the status write: deletes (a record of a later phase must not leave a worker
    running), and the cache entries a later phase reads (a merged efficiency vector: recorded
    first and lost with a replica, the next one would find it missing and estimate, and
    announce, again). Not the history's observation (best effort) nor workloads: those follow
    the record that announces them."""
    if isinstance(action, wd.Delete):
        return True
    if isinstance(action, wd.Create) and action.plural == "configmaps":
        labels = action.body["metadata"].get("labels") or {}
        return LABEL_CACHE in labels and labels[LABEL_CACHE] != "history"
    return False


def act_then_record(step: Step) -> tuple[list[wd.Action], list[wd.Action]]:
    """The order of a reconcile's writes where no site budget is involved: what must precede
    the record (`_before_record`; sent together, one round trip), then the status write with
    the ledger of `step.keyed` (the caller's `Store`), then the creates and patches in the
    order decided. The keyed Events are posted after all of them (`events.py`)."""
    actions = [a for d in step.decisions for a in d.actions if not isinstance(a, wd.PostEvent)]
    return ([a for a in actions if _before_record(a)],
            [a for a in actions if not _before_record(a)])


def _makes_workload(decision: wd.Decision) -> bool:
    return any(isinstance(a, wd.Create) and a.plural in _WORKLOADS for a in decision.actions)


def _lacks_result(decision: wd.Decision, world: wd.World) -> bool:
    """Succeeded on a watched progress ConfigMap without the trainer's result: the ConfigMap's
    watch may trail the Job's (the trainer writes its result before it exits)."""
    if decision.status.phase is not Phase.succeeded or not world.watched:
        return False
    data = world.configmaps.get(mf.progress_configmap_name(world.name)) or {}
    return RESULT_KEY not in data


class Reconciler(Gatherer):
    """Reconciles jobs with one API client and the operator settings."""

    def __init__(self, client: KubeClient, settings: OperatorSettings) -> None:
        super().__init__(client, settings)
        # A cache ConfigMap's data as the watches show it (None: not shown), where they run:
        # one they show is not created again (the history's, made once by the first job).
        self.cached: Callable[[str, str], Mapping[str, str] | None] | None = None
        # Where the writes after a record go (None: the reconcile's thread sends them).
        self.followups: Executor | None = None
        self._parallel = ThreadPoolExecutor(max_workers=4, thread_name_prefix="first-writes")

    # --- deciding ---

    def decide_all(self, patj: Obj, indexes: Indexes | None = None) -> Step:
        """Advance the job as far as the world allows right now, on paper: decide, and decide
        again on the world the step leaves while it moved the phase (up to five steps), ending
        after a step that makes a Job or DaemonSet (what it makes has produced nothing yet: what
        it publishes wakes the job, `wake.py`). Reads only; nothing is written."""
        indexes = indexes or Indexes()
        status = dc.parse_status(patj.get("status"))
        status.observed_generation = patj["metadata"].get("generation")
        step = Step(status, before=status.model_copy(deep=True))
        if status.phase.final:
            return step
        spec = dc.parse_spec(patj.get("spec"))
        entered = False
        made: dict[str, dict[str, str]] = {}
        for _ in range(MAX_STEPS):
            world = self.world(patj, step.status, spec, indexes, entered, made=made)
            decision = dc.decide(spec, step.status, world, self.settings)
            if world.watched and (dc.destructive(decision) or _lacks_result(decision, world)):
                # Decided on the watches' view, which may be late: decide again on reads.
                world = self.world(patj, step.status, spec, indexes, entered, fresh=True,
                                   made=made)
                decision = dc.decide(spec, step.status, world, self.settings)
            step.decisions.append(decision)
            step.events += decision.events
            for action in decision.actions:
                if isinstance(action, wd.Create) and action.plural == "configmaps":
                    made[str(action.body["metadata"]["name"])] = dict(
                        action.body.get("data") or {})
            before, step.status = step.status.phase, decision.status
            if step.status.phase is before or step.status.phase.final:
                break
            entered = True
            if _makes_workload(decision):
                break
        return step

    # --- acting ---

    def reconcile(self, patj: Obj, indexes: Indexes | None = None,
                  commit: Commit | None = None, store: Store | None = None) -> Step:
        """Decide (`decide_all`), then carry it out: with `store`, act then record (the caller
        then writes nothing); without, in the order decided, the status left to the caller
        (`commit`: a decision that starts a worker under a budget's grant is stored with it
        first; when that store meets a newer object, nothing of the decision is done)."""
        step = self.decide_all(patj, indexes)
        if step.before is None or step.before.phase.final:
            return step
        if store is not None:
            self._act_then_record(step, patj, store)
        else:
            self._in_order(step, patj, commit)
        return step

    def _in_order(self, step: Step, patj: Obj, commit: Commit | None) -> None:
        for decision in step.decisions:
            if commit is not None and commits_power(decision):
                decisions.decisive()
                if not commit(decision.status):
                    step.conflict = True
                    return
            self.execute(decision.actions, patj)

    def _act_then_record(self, step: Step, patj: Obj, store: Store) -> None:
        first, rest = act_then_record(step)
        if first:
            if any(isinstance(a, wd.Delete) for a in first):
                decisions.decisive_elsewhere()
            else:
                decisions.sent_elsewhere()
            # Independent objects: one round trip for all of them, not one each.
            for failure in [f for f in self._parallel.map(self._try, first) if f]:
                raise failure
        if step.phase_changed:
            decisions.decisive()
        if not store(step.status, step.keyed):
            return  # not recorded: its creates wait for a reconcile that records them first
        if rest and self.followups is not None and step.phase_changed:
            # The record moved the phase: the decision is made, and its creates need not hold
            # a reconcile thread that the next job's decision is waiting for (a burst of
            # wake-ups). Where the phase stays, the create is the decision: sent here.
            step.followup = self.followups.submit(self.execute, rest, patj)
        else:
            self.execute(rest, patj)

    def _try(self, action: wd.Action) -> Exception | None:
        try:
            self.execute([action], {})
        except Exception as exc:  # raised in the caller's thread
            return exc
        return None

    def execute(self, actions: Iterable[wd.Action], patj: Obj) -> None:
        """Carry out the actions in order, keyed Events on the job `patj` among them (the others
        are the caller's: kopf posts them after the status write)."""
        for action in actions:
            if isinstance(action, wd.PostEvent):
                if action.key is not None:
                    self.post_event(patj, action)
            elif isinstance(action, wd.Create):
                if action.plural in _WORKLOADS:
                    decisions.decisive()
                ns = action.body["metadata"].get("namespace")
                if action.plural == "configmaps" and self.cached is not None and \
                        self.cached(str(ns), str(action.body["metadata"]["name"])) is not None:
                    continue  # a cache entry the watch shows: its create would only be a 409
                try:
                    made = self.kube.create(api_path(action.api_version, action.plural, ns),
                                            action.body)
                    self.recent.add(action.plural, made or action.body)
                except KubeApiError as exc:
                    if exc.code != 409:
                        raise
            elif isinstance(action, wd.Delete):
                if action.plural in _WORKLOADS:
                    decisions.decisive()
                try:
                    self.kube.delete(api_path(action.api_version, action.plural,
                                              action.namespace, action.name),
                                     {"propagationPolicy": "Foreground" if action.foreground
                                      else "Background"})
                except KubeApiError as exc:
                    if exc.code != 404:
                        raise
                if not action.foreground:  # gone at once; a foreground one stays, deleting
                    self.recent.deleted(action.plural, action.namespace, action.name)
            elif isinstance(action, wd.Patch):
                try:
                    self.kube.patch(api_path(action.api_version, action.plural,
                                             action.namespace, action.name), action.body, "merge")
                except KubeApiError as exc:
                    if action.best_effort:
                        log.warning("%s/%s: %s not patched: %s", action.namespace, action.name,
                                    action.plural, exc)
                    elif exc.code != 404:
                        raise

    def post_event(self, patj: Obj, event: wd.PostEvent) -> None:
        """Post a keyed Event; one of the same key posted before (by any replica) is success.
        Any other refusal raises: the status is then not written, and the step is decided and
        posted again on the next tick."""
        assert event.key is not None
        body = mf.job_event(patj, event.type, event.reason, fit_string(event.message, 1000),
                            event.key, now_rfc3339())
        try:
            self.kube.create(api_path("v1", "events", body["metadata"]["namespace"]), body)
        except KubeApiError as exc:
            if exc.code != 409:
                raise
