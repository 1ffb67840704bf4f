"""An emulated node's architecture, held in the API server. A kubelet labels its Node with its
own GOARCH (`kubernetes.io/arch`) and puts it back on every status update
(`pkg/kubelet/kubelet_node_status.go`), so an amd64 kubelet that runs arm64 containers under
QEMU would always say amd64. A MutatingAdmissionPolicy (admissionregistration.k8s.io/v1)
rewrites it, on every write to a Node or its status, to the node's `edgetrain.io/emulated-arch`
label (and `status.nodeInfo.architecture` with it); nodes without that label are untouched."""

from __future__ import annotations

import time
import uuid

from edgetrain.api.keys import LABEL_EMULATED_ARCH
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path

ARCH_LABEL = "kubernetes.io/arch"
POLICY_NAME = "edgetrain-emulated-arch"
API = "admissionregistration.k8s.io/v1"


def policy() -> Obj:
    """The policy: Node labels (and nodeInfo) follow the emulated architecture."""
    arch = f"object.metadata.labels['{LABEL_EMULATED_ARCH}']"
    labels = f"Object.metadata{{labels: {{'{ARCH_LABEL}': {arch}}}}}"
    return {
        "apiVersion": API, "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["nodes", "nodes/status"]}]},
            "matchConditions": [{
                "name": "emulated-and-mislabelled",
                "expression": (
                    f"has(object.metadata.labels) && '{LABEL_EMULATED_ARCH}' in "
                    f"object.metadata.labels && (!('{ARCH_LABEL}' in object.metadata.labels) "
                    f"|| object.metadata.labels['{ARCH_LABEL}'] != {arch} || "
                    f"(has(object.status) && has(object.status.nodeInfo) && "
                    f"object.status.nodeInfo.architecture != {arch}))"),
            }],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [
                {"patchType": "ApplyConfiguration", "applyConfiguration": {
                    "expression": f"Object{{metadata: {labels}}}"}},
                {"patchType": "JSONPatch", "jsonPatch": {"expression": (
                    "has(object.status) && has(object.status.nodeInfo) ? [JSONPatch{op: "
                    f"'add', path: '/status/nodeInfo/architecture', value: {arch}}}] "
                    ": []")}},
            ],
        },
    }


def binding() -> Obj:
    """The policy's binding (every Node; the match condition picks the emulated ones)."""
    return {"apiVersion": API, "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY_NAME}, "spec": {"policyName": POLICY_NAME}}


def ensure_arch_policy(client: KubeClient, timeout_s: float = 30.0) -> float:
    """Create (or update) the policy and its binding, then wait until the API server applies
    it (it loads policies through an informer): a probe Node, created and deleted, must come
    back relabelled. Returns the seconds that took."""
    started = time.monotonic()
    client.apply(policy(), "mutatingadmissionpolicies")
    client.apply(binding(), "mutatingadmissionpolicybindings")
    name = f"edgetrain-arch-probe-{uuid.uuid4().hex[:8]}"
    probe = {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "labels": {LABEL_EMULATED_ARCH: "arm64", ARCH_LABEL: "amd64"}}}
    path = api_path("v1", "nodes", name=name)
    while True:
        try:
            made = client.create("/api/v1/nodes", probe)
        except KubeApiError as exc:
            if exc.code != 409:
                raise
            made = client.get(path)
        client.delete_ignore_missing(path)
        if made["metadata"]["labels"].get(ARCH_LABEL) == "arm64":
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"MutatingAdmissionPolicy {POLICY_NAME} not in effect after "
                               f"{timeout_s:.0f} s (the API server needs "
                               f"{API} MutatingAdmissionPolicy)")
        time.sleep(0.5)
