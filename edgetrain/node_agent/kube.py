"""The few writes the agent makes to the API server: Events and Node labels."""

from __future__ import annotations

import uuid

from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path, now_rfc3339

COMPONENT = "edgetrain-node-agent"


def event_body(pod_ref: Obj, node: str, reason: str, message: str, kind: str = "Normal",
               ) -> Obj:
    """A core/v1 Event about a pod, from this node's agent."""
    now = now_rfc3339()
    ns = pod_ref["namespace"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod_ref['name']}.{uuid.uuid4().hex[:12]}", "namespace": ns},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns,
                           "name": pod_ref["name"], "uid": pod_ref.get("uid", "")},
        "reason": reason,
        "message": message[:1000],
        "type": kind,
        "source": {"component": COMPONENT, "host": node},
        "reportingComponent": COMPONENT,
        "reportingInstance": f"{COMPONENT}-{node}",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def post_event(client: KubeClient, pod_ref: Obj, node: str, reason: str, message: str,
               kind: str = "Normal") -> None:
    """Record an Event; a failure to record is not fatal to the agent."""
    body = event_body(pod_ref, node, reason, message, kind)
    client.create(api_path("v1", "events", body["metadata"]["namespace"]), body)


def label_node(client: KubeClient, node: str, labels: dict[str, str],
               annotations: dict[str, str]) -> Obj:
    """Merge-patch the Node's labels and annotations."""
    body = {"metadata": {"labels": labels, "annotations": annotations}}
    try:
        return client.patch(api_path("v1", "nodes", name=node), body, "merge")
    except KubeApiError as exc:
        raise KubeApiError("PATCH", f"nodes/{node}", exc.code, exc.reason,
                           f"{exc.message} (the agent's ServiceAccount needs nodes get/patch)"
                           ) from exc
