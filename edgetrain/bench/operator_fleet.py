"""The cluster side of `edgetrain bench operator`: kwok stages that complete a pod only when the
bench says its work is done, an audit log of the operator's own requests, the operator's
ServiceAccount, and CPU and memory readings from /proc."""

from __future__ import annotations

import base64
import json
import os
import threading
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
from edgetrain.operator.phases import unix_seconds

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


# --- a kwok fleet set up like a healthy real one -------------------------------------------

# Node Leases of the bench's fleet: 200 s, renewed every 50 s (kwok renews at a quarter of the
# duration, as the kubelet does), at most LEASE_PARALLELISM renewals in flight. kwok's defaults
# (40 s, 4 in flight) renew 5,000 leases every ~107 s on this machine: leases lapse, nodes flap
# NotReady, and the node lifecycle controller's taint churn loads the API server.
LEASE_DURATION_S = 200
LEASE_PARALLELISM = 64


def kwok_configuration(lease_duration_s: int = LEASE_DURATION_S,
                       lease_parallelism: int = LEASE_PARALLELISM) -> str:
    """kwok's own configuration document (it goes into the same --config file as the stages;
    the duration is also given as a flag, which wins, by LocalCluster). kwok applies none of
    its defaults to a document it is given: the other options are its defaults, spelled out."""
    return yaml.safe_dump({
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {"nodeLeaseDurationSeconds": lease_duration_s,
                    "nodeLeaseParallelism": lease_parallelism,
                    "podPlayStageParallelism": 4, "nodePlayStageParallelism": 4,
                    "podsOnNodeSyncParallelism": 1, "enablePodsOnNodeSyncListPager": True,
                    "enablePodsOnNodeSyncStreamWatch": False, "enableDebuggingHandlers": True,
                    "enableContentionProfiling": False, "enableProfilingHandler": True},
    }, sort_keys=False)


def kcm_grace_args(lease_duration_s: int = LEASE_DURATION_S) -> list[str]:
    """The node lifecycle controller's grace matched to the leases (a real cluster's 40-s lease
    goes with a 40–50-s grace): a node is NotReady once its lease has not been renewed for a
    whole lease duration. And the request rate a controller-manager of a large fleet is given
    (the default 20/s takes minutes for the TTL controller's pass over 5,000 new nodes)."""
    return [f"--node-monitor-grace-period={lease_duration_s}s", "--kube-api-qps=100",
            "--kube-api-burst=200"]


class LeaseLapses:
    """Node Leases that lapsed: renewed later than their duration after the renewal before
    (from a watch of kube-node-lease), and, at the end, those not renewed for longer than it.
    Only lapses that end (or are found) within [start, end] (unix s) count."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, float]] = {}  # lease → (renewed, duration)
        self.gaps: list[tuple[str, float, float]] = []  # (lease, renewed before, renewed)
        self.renewals = 0

    def on_lease(self, kind: str, lease: Obj, _at: float = 0.0) -> None:
        """A Lease event (ADDED, MODIFIED, DELETED)."""
        name = str(lease["metadata"]["name"])
        spec = lease.get("spec") or {}
        renewed = unix_seconds(spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or 0)
        with self._lock:
            if kind == "DELETED":
                self._last.pop(name, None)
                return
            if renewed is None:
                return
            before = self._last.get(name)
            self._last[name] = (renewed, duration)
            if before is not None and renewed > before[0]:
                self.renewals += 1
                if renewed - before[0] > before[1] > 0:
                    self.gaps.append((name, before[0], renewed))

    def lapsed(self, start: float, end: float) -> list[str]:
        """The leases that lapsed in the window (each once)."""
        with self._lock:
            out = {name for name, _, renewed in self.gaps if start <= renewed <= end}
            out |= {name for name, (renewed, duration) in self._last.items()
                    if duration > 0 and end - renewed > duration}
        return sorted(out)


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
    # The API server's own time per request (received → response complete), watches left out
    round_trip_p50_s: float | None = None
    round_trip_p95_s: float | None = None


def read_audit(path: Path, start_epoch: float, end_epoch: float,
               window_s: float = 10.0) -> ApiRequests:
    """Count each request once (its auditID) received within [start, end] (epoch seconds)."""
    seen: set[str] = set()
    round_trips: list[float] = []
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
            when = unix_seconds(event.get("requestReceivedTimestamp", ""))
            if when is None:
                continue
            if not start_epoch <= when <= end_epoch:
                continue
            verb = str(event.get("verb", "?"))
            done = unix_seconds(event.get("stageTimestamp"))
            if event.get("stage") == "ResponseComplete" and verb != "watch" and done is not None:
                round_trips.append(done - when)
            seen.add(audit_id)
            ref = event.get("objectRef") or {}
            resource = str(ref.get("resource", event.get("requestURI", "?")))
            if ref.get("subresource"):
                resource += "/" + str(ref["subresource"])
            kinds[f"{verb} {resource}"] += 1
            watches += verb == "watch"
            codes[str((event.get("responseStatus") or {}).get("code", "?"))] += 1
            windows[int((when - start_epoch) // window_s)] += 1
    span = max(end_epoch - start_epoch, 1e-9)
    trips = sorted(round_trips)

    def quantile(q: float) -> float | None:
        return round(trips[min(len(trips) - 1, int(q * len(trips)))], 4) if trips else None

    return ApiRequests(
        total=len(seen),
        watches=watches,
        by_verb_resource=dict(kinds.most_common()),
        mean_per_s=len(seen) / span,
        peak_per_s=max(windows.values(), default=0) / min(window_s, span),
        status_codes=dict(sorted(codes.items())),
        round_trip_p50_s=quantile(0.5),
        round_trip_p95_s=quantile(0.95),
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
