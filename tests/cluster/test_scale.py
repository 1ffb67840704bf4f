"""Scale: hundreds of kwok idle nodes register and become Ready against the real control plane."""

from __future__ import annotations

import json
import os
import time

import pytest

from edgetrain.cluster import KubeClient, LocalCluster
from edgetrain.cluster.kwok import count_ready, create_idle_nodes, delete_idle_nodes, wait_ready

SCALE_NODES = int(os.environ.get("EDGETRAIN_SCALE_NODES", "500"))


@pytest.mark.slow
def test_kwok_nodes_register_and_become_ready(
    cluster: LocalCluster, kube: KubeClient, capsys: pytest.CaptureFixture[str]
) -> None:
    rss_before = sum(cluster.memory_rss_bytes().values())
    start = time.monotonic()
    create_idle_nodes(kube, SCALE_NODES, prefix="scale")
    created_s = time.monotonic() - start
    wait_ready(kube, SCALE_NODES, timeout_s=300)
    ready_s = time.monotonic() - start
    time.sleep(2)  # let heartbeats of all nodes run once before sampling memory
    rss = cluster.memory_rss_bytes()
    report = {
        "nodes": SCALE_NODES,
        "create_s": round(created_s, 1),
        "all_ready_s": round(ready_s, 1),
        "control_plane_rss_mib_before": round(rss_before / 2**20),
        "control_plane_rss_mib": {k: round(v / 2**20) for k, v in rss.items()},
        "control_plane_rss_mib_total": round(sum(rss.values()) / 2**20),
    }
    (cluster.run_dir / "scale-report.json").write_text(json.dumps(report, indent=2))
    with capsys.disabled():
        print(f"\nkwok scale: {json.dumps(report)}")
    try:
        assert count_ready(kube) == (SCALE_NODES, SCALE_NODES)
    finally:
        delete_idle_nodes(kube)
        deadline = time.monotonic() + 120
        while count_ready(kube)[1] and time.monotonic() < deadline:
            time.sleep(0.5)
