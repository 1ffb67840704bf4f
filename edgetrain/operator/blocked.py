"""Why a worker (estimate Job, profiling DaemonSet, training Job) has no running pod: refused at
admission (Pod Security, quota, another webhook), no node that fits, or an image that cannot
be pulled. Pure: the workload, its pods and its Warning Events in, one `Blocked` out."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from edgetrain.kube import Obj
from edgetrain.operator.phases import unix_seconds

# Scheduler messages of a pod that waits for capacity that will free up (not a mismatch).
QUEUEING = ("Insufficient ", "Too many pods")
# Container waiting reasons of an image that is not there (or cannot be named).
IMAGE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                           "ErrImageNeverPull", "RegistryUnavailable"})
# Container waiting reasons of a container the kubelet refuses to create.
CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError",
                            "RunContainerError"})
# How to fix each cause (appended to the message the user sees).
FIXES = {
    "PodSecurity": "relax the namespace's pod-security.kubernetes.io/enforce label or install"
                   " a chart whose worker pods meet it",
    "QuotaExceeded": "raise the namespace's ResourceQuota or wait for other pods to finish",
    "AdmissionRefused": "see the admission webhook or policy named in the message",
    "Unschedulable": "add a matching node or change the operator's selectors",
    "ImagePull": "check the chart's image (repository, tag, pull secret) and that the node"
                 " can reach its registry",
    "ContainerConfig": "fix the worker pod's configuration named in the message",
}


@dataclass(frozen=True)
class Blocked:
    """A worker that cannot start: `cause` (a key of FIXES, or WaitingForResources, which only
    waits), what Kubernetes said, and since when (unix s; None: unknown, so no deadline)."""

    cause: str
    detail: str
    since_s: float | None

    @property
    def waits(self) -> bool:
        """Capacity that will free up (busy GPUs, a full node): waiting, never failing."""
        return self.cause == "WaitingForResources"

    def message(self, what: str) -> str:
        """The status message: what is blocked, the cause, Kubernetes' words, the fix."""
        if self.waits:
            return f"{what}: {self.detail}"
        fix = FIXES.get(self.cause)
        return f"{what} cannot start ({self.cause}): {self.detail}" + (f"; {fix}" if fix else "")


def admission_cause(message: str) -> str:
    """The cause of a FailedCreate Event's message."""
    if "violates PodSecurity" in message:
        return "PodSecurity"
    if "exceeded quota" in message or "must specify limits" in message \
            or "must specify requests" in message:
        return "QuotaExceeded"
    return "AdmissionRefused"


def _time(obj: Obj, *keys: str) -> float | None:
    for key in keys:
        got = unix_seconds(obj.get(key))
        if got is not None:
            return got
    return None


def worker_blocked(workload: Obj | None, pods: Iterable[Obj], events: Iterable[Obj]
                   ) -> Blocked | None:
    """The first reason the worker has no running pod, or None (running, starting, or done).

    A pod that exists speaks for itself (scheduling, image); with no pod at all, the newest
    FailedCreate Event on the workload says why the controller could not create one."""
    pods = list(pods)
    for pod in pods:
        status = pod.get("status") or {}
        meta = pod.get("metadata") or {}
        name = meta.get("name", "?")
        if status.get("phase") not in (None, "Pending"):
            continue
        for cond in status.get("conditions") or []:
            if (cond.get("type") == "PodScheduled" and cond.get("status") == "False"
                    and cond.get("reason") == "Unschedulable"):
                text = str(cond.get("message", ""))
                since = unix_seconds(cond.get("lastTransitionTime"))
                if any(q in text for q in QUEUEING):
                    return Blocked("WaitingForResources",
                                   f"pod {name} waits for resources: {text}", since)
                return Blocked("Unschedulable", f"pod {name} found no node: {text}", since)
        for cs in [*(status.get("initContainerStatuses") or []),
                   *(status.get("containerStatuses") or [])]:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            reason = str(waiting.get("reason", ""))
            if reason in IMAGE_REASONS or reason in CONFIG_REASONS:
                cause = "ImagePull" if reason in IMAGE_REASONS else "ContainerConfig"
                image = f" {cs.get('image')}" if cause == "ImagePull" and cs.get("image") else ""
                return Blocked(cause, f"pod {name}{image}: {reason}: {waiting.get('message', '')}"
                               .rstrip(": "), _time(meta, "creationTimestamp"))
    if pods or workload is None:
        return None
    created = _time(workload.get("metadata") or {}, "creationTimestamp")
    refusals = [e for e in events if e.get("reason") == "FailedCreate"
                and e.get("type", "Warning") == "Warning"
                and (created is None or (_event_time(e) or created) >= created - 1)]
    if not refusals:
        return None
    newest = max(refusals, key=lambda e: _event_time(e) or 0.0)
    text = str(newest.get("message") or newest.get("note") or "")
    return Blocked(admission_cause(text), text, created if created is not None
                   else _event_time(newest))


def _event_time(event: Obj) -> float | None:
    return _time(event, "lastTimestamp", "eventTime", "firstTimestamp") or _time(
        event.get("metadata") or {}, "creationTimestamp")
