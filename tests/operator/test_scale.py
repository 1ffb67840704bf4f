"""Twenty jobs at once across a mixed fleet of real nodes (opt-in: EDGETRAIN_OPERATOR_SCALE=1).

Not part of `make test` (several minutes on 2 cores). It reports the operator's reconcile
durations (from its --verbose log), how long a finished training Job took to show up as
Succeeded, and the operator's peak memory:

    EDGETRAIN_OPERATOR_SCALE=1 .venv/bin/pytest tests/operator/test_scale.py -s
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import statistics
import threading
import time
from pathlib import Path

import pytest

from edgetrain.cluster import KubeClient, api_path, node_specs
from tests.cluster.fixtures import JETSON_ARCH, TRAINER
from tests.cluster.realnodes import RealCluster, more_nodes
from tests.operator.conftest import AGENTS_LABEL, OperatorProcess, job_manifest, patj_path

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("EDGETRAIN_OPERATOR_SCALE") != "1",
                       reason="opt-in: EDGETRAIN_OPERATOR_SCALE=1"),
]
JOBS = int(os.environ.get("EDGETRAIN_OPERATOR_SCALE_JOBS", "20"))
FLEET = {"jetson-nano": 3, "jetson-orin-nano": 2, "jetson-xavier-nx": 1}


def _ts(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def test_twenty_jobs_at_once(kube: KubeClient, namespace: str, operator: OperatorProcess,
                             real_fleet: RealCluster, session_agents: dict[str, str],
                             checkpoint_root: Path, tmp_path: Path) -> None:
    pool = "scale"
    specs = node_specs(FLEET, prefix="sc")
    nodes = more_nodes(real_fleet.cluster, kube, tmp_path / "sc", specs, JETSON_ARCH,
                       ("node-agent", TRAINER), shared_dirs=(str(checkpoint_root),))
    nodes.__enter__()
    peak_rss = [operator.rss_bytes()]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(1.0):
            peak_rss.append(operator.rss_bytes())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    log_start = len(operator.log_text())
    try:
        for spec in specs:  # in the pool, with the node agents of the module
            kube.patch(api_path("v1", "nodes", name=spec.name),
                       {"metadata": {"labels": {"edgetrain.io/pool": pool, **AGENTS_LABEL}}})
        started = time.monotonic()
        names = []
        for i in range(JOBS):
            manifest = job_manifest(
                f"scale-{i:02d}", targetAccuracy=0.3, gpuFrequenciesHz=None,
                batchSizes=[16, 64],
                placement={"nodeSelector": {"edgetrain.io/pool": pool}},
                budget={"estimateSamples": 1024, "trainSamples": 2048,
                        "evalIntervalSamples": 256, "profileMinibatches": 2, "seeds": [0]})
            kube.create(patj_path(namespace), manifest)
            names.append(manifest["metadata"]["name"])
        deadline = time.monotonic() + 1800
        while True:
            items = kube.get(patj_path(namespace))["items"]
            phases = {o["metadata"]["name"]: o.get("status", {}).get("phase") for o in items}
            if all(p in ("Succeeded", "Failed") for p in phases.values()) and len(phases) == JOBS:
                break
            assert time.monotonic() < deadline, phases
            time.sleep(2)
        wall = time.monotonic() - started
        assert all(p == "Succeeded" for p in phases.values()), phases
        nodes = {o["status"]["selection"]["node"] for o in items}
        models = {o["status"]["selection"]["deviceModel"] for o in items}
        # Job done → PATJ Succeeded: how long the operator took to notice (1 s resolution).
        jobs = {j["metadata"]["name"]: j for j in kube.get(
            api_path("batch/v1", "jobs", namespace), labelSelector="edgetrain.io/phase=train")[
            "items"]}
        lag = []
        for obj in items:
            job = jobs.get(obj["status"]["training"]["job"])
            if job and job.get("status", {}).get("completionTime"):
                lag.append(_ts(obj["status"]["finishedAt"]) - _ts(job["status"]["completionTime"]))
        estimates = kube.get(api_path("batch/v1", "jobs", namespace),
                             labelSelector="edgetrain.io/phase=estimate")["items"]
    finally:
        stop.set()
        nodes.__exit__(None, None, None)
    durations = [float(m) for m in re.findall(r"reconcile \S+ phase=\S+ ([\d.]+) ms",
                                              operator.log_text()[log_start:])]
    durations.sort()
    report = {
        "jobs": JOBS,
        "fleet": FLEET,
        "wall_s": round(wall, 1),
        "nodes_used": len(nodes),
        "device_models_chosen": sorted(models),
        "estimate_jobs": len(estimates),
        "reconciles": len(durations),
        "reconcile_ms_p50": round(statistics.median(durations), 1),
        "reconcile_ms_p95": round(durations[int(0.95 * (len(durations) - 1))], 1),
        "reconcile_ms_max": round(durations[-1], 1),
        "job_done_to_succeeded_s_median": statistics.median(lag) if lag else None,
        "job_done_to_succeeded_s_max": max(lag) if lag else None,
        "operator_rss_mib_peak": round(max(peak_rss) / 2**20, 1),
    }
    print("\n" + json.dumps(report, indent=2))
    (tmp_path / "scale-report.json").write_text(json.dumps(report, indent=2))
    # In-flight de-duplication is best effort (jobs reconciled in the same instant both start).
    assert len(estimates) <= 3, len(estimates)
