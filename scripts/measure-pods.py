"""Measure the chart's operator and node-agent pods on a local cluster while a job runs: peak
resident memory, CPU (mean over the run and peak over 5 s windows) and ephemeral storage (the
pod's logs, emptyDirs and writable files on its virtual node), read from /proc and the pod
directories of the virtual nodes. The figures behind the chart's requests and limits.

    .venv/bin/python scripts/measure-pods.py --job default/digits-5w [--interval 0.5]

Start it after `helm install` (the README's cluster block) and before `kubectl apply`; it
stops when the job is Succeeded or Failed and prints one JSON object per pod.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from edgetrain.cluster import KubeClient, api_path

PODS = ("edgetrain-operator", "edgetrain-node-agent")
TICKS_S = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Usage:
    """What one pod used so far."""

    pod: str
    pod_dir: str
    peak_rss_bytes: int = 0
    cpu_s: float = 0.0
    samples: list[tuple[float, float]] = field(default_factory=list)  # (time s, cpu s)
    peak_disk_bytes: int = 0


def pod_processes() -> dict[str, tuple[str, list[int]]]:
    """Pod name -> (pod root, pids) for processes the virtual nodes run for the chart's pods."""
    out: dict[str, tuple[str, list[int]]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = dict(kv.split("=", 1) for kv in
                       (proc / "environ").read_bytes().decode(errors="replace").split("\0")
                       if "=" in kv)
        except OSError:
            continue
        name, root = env.get("HOSTNAME", ""), env.get("EDGETRAIN_POD_ROOT")
        if root and name.startswith(PODS):
            out.setdefault(name, (root, []))[1].append(int(proc.name))
    return out


def rss_and_cpu(pids: list[int]) -> tuple[int, float]:
    rss, cpu = 0, 0.0
    for pid in pids:
        try:
            rss += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(stat[11]) + int(stat[12])) / TICKS_S  # utime + stime
        except (OSError, IndexError, ValueError):
            continue
    return rss, cpu


def disk_bytes(pod_dir: Path) -> int:
    """Bytes under the pod's directory, not following links (hostPath volumes are links)."""
    total = 0
    for dirpath, _dirs, files in os.walk(pod_dir):
        for name in files:
            p = Path(dirpath) / name
            if not p.is_symlink():
                try:
                    total += p.stat().st_blocks * 512
                except OSError:
                    pass
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", required=True, help="namespace/name of the PowerAwareTrainingJob")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    ns, name = args.job.split("/", 1)
    usage: dict[str, Usage] = {}
    start = time.monotonic()
    with KubeClient.connect() as kube:
        path = api_path("edgetrain.io/v1alpha1", "powerawaretrainingjobs", ns, name)
        phase = None
        while time.monotonic() - start < args.timeout:
            for pod, (root, pids) in pod_processes().items():
                u = usage.setdefault(pod, Usage(pod, str(Path(root).parent)))
                rss, cpu = rss_and_cpu(pids)
                u.peak_rss_bytes = max(u.peak_rss_bytes, rss)
                u.cpu_s = cpu
                u.samples.append((time.monotonic(), cpu))
                u.peak_disk_bytes = max(u.peak_disk_bytes, disk_bytes(Path(u.pod_dir)))
            obj = kube.get_or_none(path)
            phase = ((obj or {}).get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                break
            time.sleep(args.interval)
    for u in usage.values():
        (t0, c0), (t1, c1) = u.samples[0], u.samples[-1]
        peak = 0.0
        for i, (t, c) in enumerate(u.samples):
            j = next((k for k in range(i, len(u.samples)) if u.samples[k][0] - t >= 5.0), None)
            if j is not None:
                peak = max(peak, (u.samples[j][1] - c) / (u.samples[j][0] - t))
        print(json.dumps({
            "pod": u.pod, "job_phase": phase, "seconds": round(t1 - t0, 1),
            "peak_rss_mib": round(u.peak_rss_bytes / 2**20, 1),
            "mean_cpu_cores": round((c1 - c0) / max(t1 - t0, 1e-9), 3),
            "peak_cpu_cores_5s": round(peak, 3),
            "peak_ephemeral_mib": round(u.peak_disk_bytes / 2**20, 2),
        }))


if __name__ == "__main__":
    main()
