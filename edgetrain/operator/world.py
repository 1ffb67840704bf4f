"""What `decide` sees and what it asks for: the frozen `World` snapshot and the actions (data)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from edgetrain.api.budget import LabelSelector
from edgetrain.api.job_status import PowerAwareTrainingJobStatus
from edgetrain.kube import Obj
from edgetrain.operator.phases import NodeInfo

# --- the world -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Producer:
    """Another job's estimate Job or profiling DaemonSet that is still making a cache entry."""

    owner: str  # the uid of the job that made it (its controller ownerReference)
    what: str  # "job x" / "daemonset y", for the message


@dataclass(frozen=True)
class World:
    """What one reconcile step sees. `job` is the PowerAwareTrainingJob's metadata wrapped as
    `{"metadata": …}` (what the manifest builders take)."""

    job: Obj
    now_s: float
    nodes: tuple[NodeInfo, ...] = ()
    # The GPU servers (serverSelector), read only when an estimate Job is about to start: its
    # parallelism is bounded by the GPUs they allocate.
    servers: tuple[NodeInfo, ...] = ()
    training_load: Mapping[str, int] = field(default_factory=dict)
    configmaps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    jobs: Mapping[str, Obj] = field(default_factory=dict)
    daemonsets: Mapping[str, Obj] = field(default_factory=dict)
    pods: tuple[Obj, ...] = ()
    producers: Mapping[str, tuple[Producer, ...]] = field(default_factory=dict)
    # Pending only: the namespace has the worker ServiceAccount the chart creates (the operator
    # creates no RBAC); None where the phase does not look.
    worker_identity: bool | None = None
    # PowerBudget name → its node selector (Selecting, WaitingForPower, Training).
    budgets: Mapping[str, LabelSelector] = field(default_factory=dict)
    # Worker (Job or DaemonSet) name → its FailedCreate Events: read only for a worker that has
    # no pod, which is how a pod refused at admission (Pod Security, quota) shows.
    worker_events: Mapping[str, tuple[Obj, ...]] = field(default_factory=dict)
    # Some of the job's own objects came from the watches (`informer.py`), which trail the API
    # server: a decision that acts on them is taken again on fresh reads (`decide.records_only`).
    watched: bool = False

    @property
    def name(self) -> str:
        """The job's name."""
        return str(self.job["metadata"]["name"])

    @property
    def uid(self) -> str:
        """The job's uid."""
        return str(self.job["metadata"].get("uid") or "")

    @property
    def namespace(self) -> str:
        """The job's namespace."""
        return str(self.job["metadata"]["namespace"])

    @property
    def annotations(self) -> Mapping[str, str]:
        """The job's annotations."""
        return self.job["metadata"].get("annotations") or {}

    def node(self, name: str) -> NodeInfo | None:
        """A node by name (None: gone)."""
        return next((n for n in self.nodes if n.name == name), None)


# --- actions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Create:
    """Create an object; "already exists" is success (names are deterministic)."""

    api_version: str
    plural: str
    body: Obj


@dataclass(frozen=True)
class Delete:
    """Delete an object; "not found" is success. Background propagation, or `foreground`: the
    object stays, being deleted, until its pods are gone (a site budget counts them by it)."""

    api_version: str
    plural: str
    namespace: str
    name: str
    foreground: bool = False
    # Decided on the watches' view, a delete is taken again on fresh reads first (they trail
    # the API server); False where what decides it cannot be late news (a published profile:
    # cache entries never change under their name).
    confirm: bool = True


@dataclass(frozen=True)
class Patch:
    """Merge-patch an object; "not found" is success. `best_effort`: a refusal is only logged."""

    api_version: str
    plural: str
    namespace: str
    name: str
    body: Obj
    best_effort: bool = False


@dataclass(frozen=True)
class PostEvent:
    """A Kubernetes Event on the job. With a `key` (unique within the job) it is posted in
    order with the other actions, under a name derived from the job's uid and the key, before
    the status is written: a replica that decides the same step again posts the same name
    (409, ignored), so the Event is posted once, and never lost with a replica that died after
    acting. Without one (repeatable warnings) kopf posts it after the status write."""

    type: str  # Normal | Warning
    reason: str
    message: str
    key: str | None = None


Action = Create | Delete | Patch | PostEvent


@dataclass
class Decision:
    """The new status and what to do; `phase_changed` tells the caller to decide again at once
    (with a fresh world) for transitions that need no waiting."""

    status: PowerAwareTrainingJobStatus
    actions: list[Action] = field(default_factory=list)

    @property
    def events(self) -> list[PostEvent]:
        """The Events among the actions."""
        return [a for a in self.actions if isinstance(a, PostEvent)]
