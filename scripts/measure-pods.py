"""Measure the chart's operator and node-agent pods while a job runs: peak memory (working set
and RSS), CPU (mean over the run and peak over 5 s windows) and ephemeral storage, read from
each kubelet's Summary API through the API server. The figures behind the chart's requests and
limits; it works on any cluster whose kubelets serve `stats/summary` (K3s, kind, `cluster up`).

    .venv/bin/python scripts/measure-pods.py --job default/digits-5w [--interval 0.5]

Start it after `helm install` (the README's cluster block) and before `kubectl apply`; it
stops when the job is Succeeded or Failed (without `--job`, after `--timeout`) and prints one
JSON object per pod. `--prefix` names other pods (another release's, or a workload's).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from typing import Any

from edgetrain.cluster import KubeClient, api_path
from edgetrain.kube import KubeApiError

PODS = ("edgetrain-operator", "edgetrain-node-agent")  # the README release's


@dataclass
class Usage:
    """What one pod used so far, as its kubelet reports it."""

    pod: str
    node: str
    peak_working_set_bytes: int = 0
    peak_rss_bytes: int = 0
    peak_ephemeral_bytes: int = 0
    samples: list[tuple[float, float]] = field(default_factory=list)  # (time s, cpu s)


def pod_nodes(kube: KubeClient, prefixes: tuple[str, ...]) -> set[str]:
    """Nodes that run a pod whose name starts with one of `prefixes` now."""
    pods = kube.get(api_path("v1", "pods"))["items"]
    return {p["spec"]["nodeName"] for p in pods
            if p["metadata"]["name"].startswith(prefixes) and p["spec"].get("nodeName")}


def pod_stats(kube: KubeClient, node: str, prefixes: tuple[str, ...]) -> list[dict[str, Any]]:
    """The node's pods in its kubelet's Summary API; none where the kubelet cannot answer."""
    try:
        summary = kube.get(f"/api/v1/nodes/{node}/proxy/stats/summary")
    except KubeApiError as exc:  # a node lost mid-run is reported, not fatal
        print(json.dumps({"node": node, "error": f"stats/summary: {exc}"}))
        return []
    return [p for p in summary.get("pods", []) if p["podRef"]["name"].startswith(prefixes)]


def peak_cpu_cores(samples: list[tuple[float, float]], window_s: float = 5.0) -> float:
    """The highest mean CPU over any window of at least window_s between two samples."""
    peak = 0.0
    for i, (t, c) in enumerate(samples):
        j = next((k for k in range(i, len(samples)) if samples[k][0] - t >= window_s), None)
        if j is not None:
            peak = max(peak, (samples[j][1] - c) / (samples[j][0] - t))
    return peak


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--job", help="namespace/name of the PowerAwareTrainingJob to wait for")
    ap.add_argument("--prefix", action="append", help=f"pod name prefix (default: {PODS})")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    prefixes = tuple(args.prefix or PODS)
    usage: dict[str, Usage] = {}
    start = time.monotonic()
    with KubeClient.connect() as kube:
        path = (api_path("edgetrain.io/v1alpha1", "powerawaretrainingjobs",
                         *args.job.split("/", 1)) if args.job else None)
        phase = None
        while time.monotonic() - start < args.timeout:
            for node in sorted(pod_nodes(kube, prefixes)):
                for stats in pod_stats(kube, node, prefixes):
                    pod = stats["podRef"]["name"]
                    u = usage.setdefault(pod, Usage(pod, node))
                    mem, cpu = stats.get("memory") or {}, stats.get("cpu") or {}
                    eph = stats.get("ephemeral-storage") or {}
                    u.peak_working_set_bytes = max(u.peak_working_set_bytes,
                                                   mem.get("workingSetBytes", 0))
                    u.peak_rss_bytes = max(u.peak_rss_bytes, mem.get("rssBytes", 0))
                    u.peak_ephemeral_bytes = max(u.peak_ephemeral_bytes, eph.get("usedBytes", 0))
                    if "usageCoreNanoSeconds" in cpu:
                        # The kubelet's stats refresh every few seconds: keep new readings only.
                        reading = (time.monotonic(), cpu["usageCoreNanoSeconds"] / 1e9)
                        if not u.samples or reading[1] != u.samples[-1][1]:
                            u.samples.append(reading)
            obj = kube.get_or_none(path) if path else None
            phase = ((obj or {}).get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                break
            time.sleep(args.interval)
    for u in usage.values():
        (t0, c0), (t1, c1) = (u.samples[0], u.samples[-1]) if u.samples else ((0, 0), (0, 0))
        print(json.dumps({
            "pod": u.pod, "node": u.node, "job_phase": phase, "seconds": round(t1 - t0, 1),
            "peak_working_set_mib": round(u.peak_working_set_bytes / 2**20, 1),
            "peak_rss_mib": round(u.peak_rss_bytes / 2**20, 1),
            "cpu_s": round(c1, 1),
            "mean_cpu_cores": round((c1 - c0) / max(t1 - t0, 1e-9), 3),
            "peak_cpu_cores_5s": round(peak_cpu_cores(u.samples), 3),
            "peak_ephemeral_mib": round(u.peak_ephemeral_bytes / 2**20, 2),
        }))


if __name__ == "__main__":
    main()
