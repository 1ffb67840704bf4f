"""A site power budget end to end: three Nano vnodes under one 9 W PowerBudget, three jobs
with their own 5 W limits, on the real control plane with the operator process.

The budget's planned draw never exceeds the cap; a cap lowered mid-training makes the jobs
re-plan (the limit-change path, resuming from their checkpoints) and they still succeed; a cap
that fits only two jobs makes the youngest wait in WaitingForPower, naming the budget, and it
runs to success once another job finishes and frees its share.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgetrain.api import EfficiencyVector
from edgetrain.api.budget import BUDGET_PLURAL
from edgetrain.api.job import PowerAwareTrainingJobSpec, efficiency_cache_key
from edgetrain.api.profile import parse_profile_csv
from edgetrain.cluster import KubeApiError, KubeClient, VNodeAgent, api_path, node_specs
from edgetrain.operator import manifests as mf
from tests.operator.conftest import GROUP_VERSION, OperatorProcess, job_manifest, patj_path
from tests.operator.test_e2e import LONGER, _events, _wait_status

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
CAP_W = 9.0


class Watch:
    """Samples the budget's status and the jobs' plans every 0.2 s in a thread."""

    def __init__(self, kube: KubeClient, budget: str, namespace: str, names: list[str]) -> None:
        self.kube, self.budget, self.namespace, self.names = kube, budget, namespace, names
        self.samples: list[tuple[float, float, float]] = []  # (cap, planned, Σ training plans)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                st = self.kube.get(api_path(GROUP_VERSION, BUDGET_PLURAL,
                                            name=self.budget)).get("status") or {}
                items = self.kube.get(patj_path(self.namespace))["items"]
            except KubeApiError:
                continue
            plans = sum((o.get("status", {}).get("selection") or {}).get("powerWatts", 0.0)
                        for o in items if o.get("status", {}).get("phase") == "Training")
            if st.get("plannedWatts") is not None:
                self.samples.append((st["capWatts"], st["plannedWatts"], plans))


def seed_efficiency(kube: KubeClient, namespace: str, spec: dict[str, Any]) -> None:
    """The efficiency vector of these jobs in the namespace's cache (a cache hit)."""
    parsed = PowerAwareTrainingJobSpec.model_validate(spec)
    key = efficiency_cache_key(parsed, mf.weights_identity(parsed))
    vector = EfficiencyVector.from_samples(
        model=parsed.model.architecture, dataset=parsed.dataset.name,
        target_accuracy=parsed.target_accuracy, batch_sizes=list(parsed.batch_sizes),
        samples_to_accuracy=[2048.0, 3072.0])
    kube.create(api_path("v1", "configmaps", namespace), {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": mf.efficiency_configmap_name(key),
                     "labels": {"edgetrain.io/cache": "efficiency",
                                "edgetrain.io/cache-key": key}},
        "data": {"efficiency.json": vector.model_dump_json()}})


def _budget(kube: KubeClient, name: str) -> dict[str, Any]:
    return kube.get(api_path(GROUP_VERSION, BUDGET_PLURAL, name=name))


def _set_cap(kube: KubeClient, name: str, watts: float) -> None:
    kube.patch(api_path(GROUP_VERSION, BUDGET_PLURAL, name=name),
               {"spec": {"capWatts": watts}})


@pytest.fixture
def site(kube: KubeClient, namespace: str, tmp_path: Path) -> Iterator[tuple[str, VNodeAgent]]:
    """Three Nano vnodes labelled as one site, and a 9 W PowerBudget over them."""
    name = f"site-{namespace[-5:]}"
    agent = VNodeAgent(kube, node_specs({"jetson-nano": 3}, prefix=name), tmp_path / "vn",
                       restart_backoff_s=0.5, max_backoff_s=2.0)
    agent.start()
    path = api_path(GROUP_VERSION, BUDGET_PLURAL)
    try:
        agent.wait_ready()
        for node in agent.nodes:
            kube.patch(api_path("v1", "nodes", name=node.name),
                       {"metadata": {"labels": {"edgetrain.io/site": name}}})
        kube.create(path, {"apiVersion": GROUP_VERSION, "kind": "PowerBudget",
                           "metadata": {"name": name},
                           "spec": {"nodeSelector": {"matchLabels": {"edgetrain.io/site": name}},
                                    "capWatts": CAP_W}})
        yield name, agent
    finally:
        with contextlib.suppress(KubeApiError):
            kube.delete(api_path(GROUP_VERSION, BUDGET_PLURAL, name=name))
        agent.stop()


def test_three_jobs_share_a_nine_watt_site(
    kube: KubeClient, namespace: str, operator: OperatorProcess,
    site: tuple[str, VNodeAgent],
) -> None:
    budget, _agent = site
    st = kube.wait_for(api_path(GROUP_VERSION, BUDGET_PLURAL, name=budget),
                       lambda o: len((o.get("status") or {}).get("nodes") or []) == 3,
                       timeout_s=60, interval_s=0.5, what="budget sees its 3 nodes")["status"]
    idle_per_node = st["idleWatts"] / 3
    assert 0.5 < idle_per_node < 3.0, st  # the Nano's idle draw
    names = ["b1", "b2", "b3"]
    manifests = [job_manifest(n, placement={"nodeSelector": {"edgetrain.io/site": budget}},
                              **LONGER) for n in names]
    seed_efficiency(kube, namespace, manifests[0]["spec"])  # the estimate is tested elsewhere
    with Watch(kube, budget, namespace, names) as watch:
        for body in manifests:
            kube.create(patj_path(namespace), body)
            time.sleep(0.3)  # arrival order b1, b2, b3
        objs = {n: _wait_status(kube, namespace, n,
                                lambda s: s.get("phase") == "Training"
                                and (s.get("training") or {}).get("samples", 0) > 0,
                                "training under its share", operator, timeout_s=420)
                for n in names}
        nodes = {o["status"]["selection"]["node"] for o in objs.values()}
        assert len(nodes) == 3, objs  # one job per node
        cm = kube.get(api_path("v1", "configmaps", namespace,
                               objs["b1"]["status"]["profiles"][0]["configMap"]))
        powers = sorted(p.peak_power_w for p in parse_profile_csv(cm["data"]["profile.csv"])
                        if p.peak_power_w <= 5.0)
        p_min = powers[0]
        st = _budget(kube, budget)["status"]
        assert st["jobs"] == 3 and st["plannedWatts"] <= CAP_W + 1e-6, st
        # 1. A cap that still fits all three at their cheapest points, below what they plan now.
        lowered = round(3 * p_min + 0.05, 3)
        before = {n: o["status"]["selection"]["powerLimitWatts"] for n, o in objs.items()}
        assert lowered < sum(before.values()), (lowered, before, powers)
        _set_cap(kube, budget, lowered)
        for n in names:
            _wait_status(kube, namespace, n,
                         lambda s: s.get("phase") in ("Training", "Succeeded")
                         and (s.get("selection") or {}).get("powerLimitWatts", 99) <= p_min + 0.05,
                         "re-planned under the lowered cap", operator, timeout_s=240)
        replanned = [n for n in names if before[n] > p_min + 0.05]
        for n in replanned:
            assert "PowerLimitChanged" in [r for r, _ in _events(kube, namespace, n)], n
        # 2. A cap that fits two: the youngest still training waits, naming the budget.
        _set_cap(kube, budget, round(2 * p_min + idle_per_node + 0.05, 3))
        waiting = _wait_status(kube, namespace, "b3",
                               lambda s: s.get("phase") in ("WaitingForPower", "Succeeded"),
                               "b3 waits for power", operator, timeout_s=240)["status"]
        if waiting["phase"] == "WaitingForPower":
            assert f"PowerBudget {budget}" in waiting["message"], waiting
        # 3. Everyone succeeds: b3 runs once b1 or b2 frees its share.
        for n in names:
            done = _wait_status(kube, namespace, n,
                                lambda s: s.get("phase") in ("Succeeded", "Failed"),
                                "done", operator, timeout_s=600)["status"]
            assert done["phase"] == "Succeeded", done
        assert objs and waiting
    assert watch.samples, "the budget never reported a plan"
    worst = max(planned for _cap, planned, _plans in watch.samples)
    plans = max(p for _cap, _planned, p in watch.samples)
    assert worst <= CAP_W + 1e-6 and plans <= CAP_W + 1e-6, (worst, plans)
    # After each cap change the planned draw came down to the new cap.
    final_cap, final_planned, _ = watch.samples[-1]
    assert final_planned <= final_cap + 1e-6, watch.samples[-5:]
    reasons = [r for r, _ in _events(kube, namespace, "b3")]
    assert "PowerWithdrawn" in reasons or "WaitingForPower" in reasons, reasons
