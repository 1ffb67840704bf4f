"""API-server access for the agent: in-cluster ServiceAccount credentials or a kubeconfig,
plus the few writes it makes (Events, Node labels)."""

from __future__ import annotations

import datetime as dt
import os
import uuid
from pathlib import Path

from edgetrain.cluster.client import KubeApiError, KubeClient, Obj, api_path
from edgetrain.cluster.kubeconfig import KubeConfig, KubeconfigError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
ENV_SERVICE_ACCOUNT_DIR = "EDGETRAIN_SA_DIR"  # same variable as the operator's workers
COMPONENT = "edgetrain-node-agent"


def in_cluster_config(sa_dir: Path | None = None) -> KubeConfig:
    """KUBERNETES_SERVICE_HOST/PORT plus the mounted token and CA, as client-go does."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    base = sa_dir or Path(os.environ.get(ENV_SERVICE_ACCOUNT_DIR) or SERVICE_ACCOUNT_DIR)
    token_file = base / "token"
    if not host or not token_file.exists():
        raise FileNotFoundError(
            f"not in a cluster: KUBERNETES_SERVICE_HOST={host!r}, token {token_file} "
            f"{'exists' if token_file.exists() else 'missing'}; pass --kubeconfig")
    ca = base / "ca.crt"
    ns_file = base / "namespace"
    server_host = f"[{host}]" if ":" in host else host
    return KubeConfig(
        server=f"https://{server_host}:{port}",
        ca_pem=ca.read_bytes() if ca.exists() else None,
        token=token_file.read_text().strip(),
        namespace=ns_file.read_text().strip() if ns_file.exists() else "default",
        source=token_file,
    )


def connect(kubeconfig: Path | None, sa_dir: Path | None = None) -> KubeClient:
    """A kubeconfig if given, else in-cluster credentials, else the default kubeconfig."""
    if kubeconfig is not None:
        return KubeClient.from_kubeconfig(kubeconfig)
    try:
        return KubeClient(in_cluster_config(sa_dir))
    except FileNotFoundError as in_cluster:
        try:
            return KubeClient.from_kubeconfig(None)
        except KubeconfigError as exc:
            raise KubeconfigError(f"no API credentials: {in_cluster}; {exc}") from exc


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(pod_ref: Obj, node: str, reason: str, message: str, kind: str = "Normal",
               ) -> Obj:
    """A core/v1 Event about a pod, from this node's agent."""
    now = _now()
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
