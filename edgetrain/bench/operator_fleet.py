"""The cluster side of `edgetrain bench operator`: kwok stages that complete a pod only when the
bench says its work is done, an audit log of the operator's own requests, the operator's
ServiceAccount, and CPU and memory readings from /proc."""

from __future__ import annotations

import base64
import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from edgetrain.api.crd import CRD_NAME
from edgetrain.api.crd_files import crd_files
from edgetrain.api.keys import ANNOTATION_BENCH_DONE
from edgetrain.cluster.pki import Pki, write_atomic
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path

OPERATOR_NAMESPACE = "edgetrain-system"
OPERATOR_SA = "edgetrain-operator"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_SA}"
TOKEN_LIFETIME_S = 24 * 3600
MIB = 2**20


# --- kwok stages -----------------------------------------------------------------------------


def bench_stages(upstream: str) -> str:
    """kwok's stages with `pod-complete` gated on the bench's annotation and without delay.

    Upstream completes a Job's pod as soon as it runs; a real worker publishes its ConfigMap
    first and then exits, so the pod must wait until the fake worker has published.
    """
    docs = [d for d in yaml.safe_load_all(upstream) if d]
    gated = 0
    for doc in docs:
        if doc.get("kind") == "Stage" and doc.get("metadata", {}).get("name") == "pod-complete":
            spec = doc.setdefault("spec", {})
            selector = spec.setdefault("selector", {})
            selector.setdefault("matchExpressions", []).append(
                {"key": f'.metadata.annotations["{ANNOTATION_BENCH_DONE}"]', "operator": "Exists"}
            )
            spec.pop("delay", None)
            gated += 1
    if not gated:
        raise RuntimeError("kwok's stage file has no pod-complete stage; rebuild it with"
                           " `make cluster-bins`")
    return yaml.safe_dump_all(docs, sort_keys=False)


# --- audit log of the operator's requests ----------------------------------------------------


def audit_args(run_dir: Path) -> list[str]:
    """kube-apiserver flags that log every request of the operator's ServiceAccount (only)."""
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Metadata", "users": [OPERATOR_USER]},
            {"level": "None"},
        ],
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "audit-policy.yaml"
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    return [
        f"--audit-policy-file={path}",
        f"--audit-log-path={audit_log_path(run_dir)}",
        "--audit-log-format=json",
        "--audit-log-maxsize=0",  # no rotation: the bench reads one file
    ]


def apiserver_request_counts(metrics_text: str) -> Counter[str]:
    """Requests the API server has answered, from every client, by "VERB resource[/sub]"
    (its `apiserver_request_total`, summed over codes and versions)."""
    counts: Counter[str] = Counter()
    for family in text_string_to_metric_families(metrics_text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name != "apiserver_request_total":
                continue
            labels = sample.labels
            resource = labels.get("resource", "")
            if labels.get("subresource"):
                resource = f"{resource}/{labels['subresource']}"
            counts[f"{labels.get('verb', '')} {resource}".strip()] += int(sample.value)
    return counts


def audit_log_path(run_dir: Path) -> Path:
    """Where the API server writes the operator's audit events."""
    return run_dir / "logs" / "audit-operator.log"


class ApiRequests(BaseModel):
    """The operator's requests as the API server logged them."""

    total: int
    watches: int
    by_verb_resource: dict[str, int]  # "list nodes": n, most frequent first
    mean_per_s: float  # over the bench window
    peak_per_s: float  # busiest 10-s window (or the whole window when shorter)
    status_codes: dict[str, int]  # 404 and 409 are normal: "not there yet", "already exists"


def read_audit(path: Path, start_epoch: float, end_epoch: float,
               window_s: float = 10.0) -> ApiRequests:
    """Count each request once (its auditID) received within [start, end] (epoch seconds)."""
    import datetime as dt

    seen: set[str] = set()
    kinds: Counter[str] = Counter()
    windows: Counter[int] = Counter()
    codes: Counter[str] = Counter()
    watches = 0
    try:
        lines = path.open(encoding="utf-8", errors="replace")
    except OSError:
        return ApiRequests(total=0, watches=0, by_verb_resource={}, mean_per_s=0.0,
                           peak_per_s=0.0, status_codes={})
    with lines:
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line cut by the API server's exit
            audit_id = event.get("auditID")
            if not audit_id or audit_id in seen or event.get("user", {}).get(
                    "username") != OPERATOR_USER:
                continue
            stamp = event.get("requestReceivedTimestamp", "")
            try:
                when = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
            if not start_epoch <= when <= end_epoch:
                continue
            seen.add(audit_id)
            verb = str(event.get("verb", "?"))
            ref = event.get("objectRef") or {}
            resource = str(ref.get("resource", event.get("requestURI", "?")))
            if ref.get("subresource"):
                resource += "/" + str(ref["subresource"])
            kinds[f"{verb} {resource}"] += 1
            watches += verb == "watch"
            codes[str((event.get("responseStatus") or {}).get("code", "?"))] += 1
            windows[int((when - start_epoch) // window_s)] += 1
    span = max(end_epoch - start_epoch, 1e-9)
    return ApiRequests(
        total=len(seen),
        watches=watches,
        by_verb_resource=dict(kinds.most_common()),
        mean_per_s=len(seen) / span,
        peak_per_s=max(windows.values(), default=0) / min(window_s, span),
        status_codes=dict(sorted(codes.items())),
    )


# --- the operator's identity -----------------------------------------------------------------


def _create(kube: KubeClient, path: str, body: Obj) -> None:
    try:
        kube.create(path, body)
    except KubeApiError as exc:
        if exc.code != 409:
            raise


def operator_kubeconfig(kube: KubeClient, pki: Pki, path: Path) -> Path:
    """A kubeconfig with a token of the operator's own ServiceAccount (bound to cluster-admin),
    so that the audit log can tell its requests from everyone else's."""
    _create(kube, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": OPERATOR_NAMESPACE}})
    _create(kube, api_path("v1", "serviceaccounts", OPERATOR_NAMESPACE),
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": OPERATOR_SA, "namespace": OPERATOR_NAMESPACE}})
    _create(kube, api_path("rbac.authorization.k8s.io/v1", "clusterrolebindings"), {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "edgetrain-bench-operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_SA,
                      "namespace": OPERATOR_NAMESPACE}],
    })
    answer = kube.create(
        api_path("v1", "serviceaccounts", OPERATOR_NAMESPACE, OPERATOR_SA, "token"),
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": TOKEN_LIFETIME_S}})
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "bench", "cluster": {
            "server": kube.server,
            "certificate-authority-data": base64.b64encode(pki.ca_crt.read_bytes()).decode()}}],
        "users": [{"name": OPERATOR_SA, "user": {"token": answer["status"]["token"]}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": OPERATOR_SA}}],
        "current-context": "bench",
    }
    write_atomic(path, yaml.safe_dump(doc, sort_keys=False).encode())
    return path


def apply_crds(kube: KubeClient) -> None:
    """The generated CRDs (what `edgetrain crds` writes), applied server-side."""
    for text in crd_files().values():
        for doc in yaml.safe_load_all(text):
            if doc:
                kube.apply(doc, "customresourcedefinitions")
    kube.wait_for(
        api_path("apiextensions.k8s.io/v1", "customresourcedefinitions", name=CRD_NAME),
        lambda crd: any(c.get("type") == "Established" and c.get("status") == "True"
                        for c in (crd.get("status") or {}).get("conditions") or []),
        timeout_s=60, what="CRD Established")


# --- /proc readings --------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcReading:
    """CPU seconds (user + system) and memory of one process at one moment."""

    cpu_s: float
    rss_bytes: int
    peak_rss_bytes: int  # VmHWM: the kernel's high-water mark of the resident set


def read_proc(pid: int) -> ProcReading | None:
    """The process's CPU time and memory from /proc (None if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces): state is [0], utime [11], stime [12].
    fields = stat.rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    mem: dict[str, int] = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            mem[key] = int(value.split()[0]) * 1024
    return ProcReading((int(fields[11]) + int(fields[12])) / ticks, mem.get("VmRSS", 0),
                       mem.get("VmHWM", 0))


def node_list_bytes(kube: KubeClient) -> int:
    """Size of one `GET /api/v1/nodes` answer: what a cluster-wide node list costs each time."""
    listing: Any = kube.get("/api/v1/nodes")
    return len(json.dumps(listing))
