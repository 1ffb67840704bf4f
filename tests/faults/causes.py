"""Why a worker cannot start, made real in the fault suite's fleet: one cause per job (issue 31,
item 3). Each cause is in force before its job exists (an admission policy and a quota are
probed with a dry-run pod until they refuse), and is lifted when the test ends."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from edgetrain.api.keys import LABEL_JOB
from edgetrain.cluster import KubeApiError, api_path
from edgetrain.operator.phases import unix_seconds
from edgetrain.operator.worker_security import restrict
from tests.faults.conftest import Fleet

ADMISSION = "admissionregistration.k8s.io/v1"
TAINT = {"key": "edgetrain.io/maintenance", "value": "planned", "effect": "NoSchedule"}


@dataclass
class Case:
    """One job whose worker cannot start: the cause the job must name, the words of
    Kubernetes it must pass on, and the spec that puts it there."""

    job: str
    cause: str
    words: tuple[str, ...]
    how: str
    spec: dict[str, Any] = field(default_factory=dict)


def _refused(fleet: Fleet, pod: dict[str, Any], words: str, what: str) -> None:
    """Until a dry-run create of `pod` is refused with `words` (a new policy or quota is
    enforced once the API server's informers have it, a moment after its creation)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            fleet.kube.create(api_path("v1", "pods", fleet.ns), pod, dryRun="All")
        except KubeApiError as exc:
            if exc.code in (403, 422) and words in str(exc):
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not enforced in 30 s")
        time.sleep(0.3)


def _probe_pod(labels: dict[str, str], resources: dict[str, Any] | None = None
               ) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "probe", "image": "edgetrain:latest"}
    if resources:
        container["resources"] = resources
    # Confined as the workers are: the fleet's namespace enforces `restricted`, which would
    # refuse a bare pod before the policy or the quota had their say.
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "probe-", "labels": labels},
            "spec": restrict({"containers": [container]})}


@contextlib.contextmanager
def blocked_workers(fleet: Fleet) -> Iterator[list[Case]]:
    """The four causes in force in the fleet's namespace, one job each:
    - admission: a ValidatingAdmissionPolicy denies the pods of one job (by its label);
    - quota: a ResourceQuota of 0 GPUs; only an estimate pod asks for one (the GPU server's),
      and only that job misses the efficiency cache;
    - no node that fits: the job's one node is tainted, which the operator does not plan
      around and the scheduler does not pass;
    - a missing image: the job's one node does not hold it and cannot reach its registry."""
    policy = f"{fleet.ns}-deny"
    cases = [
        Case("blk-admission", "AdmissionRefused", (policy, "denied request"),
             f"ValidatingAdmissionPolicy {policy} denies the job's pods"),
        Case("blk-quota", "QuotaExceeded", ("exceeded quota", "no-gpus", "nvidia.com/gpu"),
             "ResourceQuota no-gpus: requests.nvidia.com/gpu 0; the estimate asks for 1",
             {"targetAccuracy": 0.55}),  # its own efficiency vector: an estimate runs
        Case("blk-no-node", "Unschedulable", ("untolerated taint",),
             f"the one node of its placement is tainted {TAINT['key']}:NoSchedule"),
        # ErrImagePull or ImagePullBackOff, whichever the deadline meets: the worker image named.
        Case("blk-image", "ImagePull", ("/trainer:",),
             "the one node of its placement cannot reach its registry"),
    ]
    vap = api_path(ADMISSION, "validatingadmissionpolicies", name=policy)
    binding = api_path(ADMISSION, "validatingadmissionpolicybindings", name=policy)
    quota = api_path("v1", "resourcequotas", fleet.ns, "no-gpus")
    try:
        fleet.kube.create(api_path(ADMISSION, "validatingadmissionpolicies"), {
            "apiVersion": ADMISSION, "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {"failurePolicy": "Fail",
                     "matchConstraints": {"resourceRules": [{
                         "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                         "resources": ["pods"]}]},
                     "validations": [{"expression": "false",
                                      "message": f"{policy}: no pods for this job"}]}})
        fleet.kube.create(api_path(ADMISSION, "validatingadmissionpolicybindings"), {
            "apiVersion": ADMISSION, "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {"policyName": policy, "validationActions": ["Deny"],
                     "matchResources": {
                         "namespaceSelector": {"matchLabels": {
                             "kubernetes.io/metadata.name": fleet.ns}},
                         "objectSelector": {"matchLabels": {LABEL_JOB: "blk-admission"}}}}})
        fleet.kube.create(api_path("v1", "resourcequotas", fleet.ns), {
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-gpus"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}})
        _refused(fleet, _probe_pod({LABEL_JOB: "blk-admission"}), policy, "the policy")
        _refused(fleet, _probe_pod({}, {"limits": {"nvidia.com/gpu": "1"}}), "exceeded quota",
                 "the quota")
        (tainted,) = fleet.add_nanos("taint", trainer=False)  # the scheduler refuses it
        fleet.kube.patch(api_path("v1", "nodes", name=tainted), {"spec": {"taints": [TAINT]}})
        fleet.add_nanos("noreg", registry_reachable=False)
        for case, label in ((cases[2], "taint"), (cases[3], "noreg")):
            case.spec["placement"] = {"nodeSelector": {"edgetrain.io/site":
                                                       f"{fleet.pool}-{label}"}}
        yield cases
    finally:
        for path in (binding, vap, quota):
            fleet.kube.delete_ignore_missing(path)
        fleet.remove_extra()


def said_at(fleet: Fleet, job: str, cause: str, status: dict[str, Any]) -> float | None:
    """When the job first said why (unix s): its WorkerBlocked condition, or its Failed one if
    no poll saw it blocked before the deadline, and the first Warning Event of the cause."""
    conditions = [unix_seconds(c.get("lastTransitionTime"))
                  for c in status.get("conditions") or []
                  if c.get("type") in ("WorkerBlocked", "Failed") and c.get("reason") == cause]
    events = [unix_seconds(e.get("eventTime") or e.get("firstTimestamp")
                           or e["metadata"].get("creationTimestamp"))
              for e in fleet.events(job) if e.get("type") == "Warning" and e["reason"] == cause]
    said = [min(t for t in ts if t is not None)
            for ts in (conditions, events) if any(t is not None for t in ts)]
    return max(said) if len(said) == 2 else None
