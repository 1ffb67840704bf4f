"""A site power budget end to end: three Nano vnodes under one 9 W PowerBudget, three jobs
with their own 5 W limits, on the real control plane with the operator process.

The budget's planned draw never exceeds the cap; a cap raised mid-training lets the jobs
speed up and a cap lowered again makes them re-plan down (the limit-change path, resuming from
their checkpoints); a cap that fits only two jobs makes the youngest wait in WaitingForPower,
naming the budget, and it runs to success once another job finishes and frees its share. The
jobs hold at their first checkpoint (edgetrain.io/inject-hold) until the caps have been tried,
so none finishes before the test has looked.
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
from edgetrain.api.efficiency import parse_efficiency_json
from edgetrain.api.job import PowerAwareTrainingJobSpec, efficiency_cache_key
from edgetrain.api.keys import ANNOTATION_INJECT_HOLD
from edgetrain.api.profile import parse_profile_csv
from edgetrain.cluster import KubeApiError, KubeClient, VNodeAgent, api_path, node_specs
from edgetrain.operator import manifests as mf
from edgetrain.operator.manifests import release_configmap_name
from edgetrain.planner.budget import JobOptions, job_options
from edgetrain.planner.lut import Lut
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


def _wait_plans(kube: KubeClient, namespace: str, names: list[str], ok: Any, what: str,
                op: OperatorProcess, timeout_s: float = 240) -> dict[str, float]:
    """Wait until the training jobs' planned limits, summed, pass `ok`; each job's limit."""
    deadline = time.monotonic() + timeout_s
    plans: dict[str, float] = {}
    while time.monotonic() < deadline:
        items = {o["metadata"]["name"]: o.get("status") or {}
                 for o in kube.get(patj_path(namespace))["items"]}
        plans = {n: (items.get(n, {}).get("selection") or {}).get("powerLimitWatts", 0.0)
                 for n in names if items.get(n, {}).get("phase") == "Training"}
        if len(plans) == len(names) and ok(sum(plans.values())):
            return plans
        time.sleep(0.5)
    raise TimeoutError(f"{what} not reached in {timeout_s} s (last: {plans})\n"
                       f"operator log tail:\n{op.log_text()[-4000:]}")


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
    for body in manifests:
        body["metadata"]["annotations"] = {ANNOTATION_INJECT_HOLD: "train"}
    seed_efficiency(kube, namespace, manifests[0]["spec"])  # the estimate is tested elsewhere
    training = _training_with_samples
    with Watch(kube, budget, namespace, names) as watch:
        for body in manifests:
            kube.create(patj_path(namespace), body)
            time.sleep(0.3)  # arrival order b1, b2, b3
        # 1. Three 5 W jobs under 9 W: the first two train at once; the third trains beside
        # them if all three fit at points the budget finds worth it, or waits for power.
        objs = {n: _wait_status(kube, namespace, n, training, "training under its share",
                                operator, timeout_s=420) for n in names[:2]}
        third = _wait_status(kube, namespace, "b3", lambda s: training(s) or s.get("phase")
                             == "WaitingForPower", "b3 trains or waits", operator)["status"]
        st = _budget(kube, budget)["status"]
        assert st["plannedWatts"] <= CAP_W + 1e-6, st
        if third["phase"] == "WaitingForPower":
            assert f"PowerBudget {budget}" in third["message"], third
        options = _options(kube, namespace, objs["b1"]["status"])
        p_min = options.min_power_w
        # 2. A cap over what the three ask for on their own (5 W each): all train, faster
        # than at their cheapest points.
        _set_cap(kube, budget, 3 * 5.0 + st["idleWatts"] + 1.0)
        cheapest = 3 * p_min + 0.05
        raised = _wait_plans(kube, namespace, names, lambda total: total > cheapest,
                             "all training, above their cheapest points, under a raised cap",
                             operator)
        objs = {n: _wait_status(kube, namespace, n, training, "training under the raised cap",
                                operator) for n in names}
        nodes = {o["status"]["selection"]["node"] for o in objs.values()}
        assert len(nodes) == 3, objs  # one job per node
        # 3. A cap that fits all three at their cheapest points only: they re-plan down.
        _set_cap(kube, budget, round(cheapest, 3))
        for n in names:
            _wait_status(kube, namespace, n,
                         lambda s: s.get("phase") == "Training"
                         and (s.get("selection") or {}).get("powerLimitWatts", 99) <= p_min + 0.05,
                         "re-planned under the lowered cap", operator, timeout_s=240)
        for n in names:
            if raised[n] > p_min + 0.05:
                assert "PowerLimitChanged" in [r for r, _ in _events(kube, namespace, n)], n
        # 4. A cap that fits two: the youngest waits, naming the budget (b1, b2 are held).
        _set_cap(kube, budget, round(2 * p_min + idle_per_node + 0.05, 3))
        waiting = _wait_status(kube, namespace, "b3",
                               lambda s: s.get("phase") == "WaitingForPower",
                               "b3 waits for power", operator, timeout_s=240)["status"]
        assert f"PowerBudget {budget}" in waiting["message"], waiting
        # 5. Everyone succeeds: b3 runs once b1 or b2 frees its share.
        for n in names:
            kube.create(api_path("v1", "configmaps", namespace),
                        {"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": release_configmap_name(n, "train")}})
        for n in names:
            done = _wait_status(kube, namespace, n,
                                lambda s: s.get("phase") in ("Succeeded", "Failed"),
                                "done", operator, timeout_s=600)["status"]
            assert done["phase"] == "Succeeded", done
    assert watch.samples, "the budget never reported a plan"
    # The planned draw never passed the highest cap so far: after a lowered cap it still counts
    # what running jobs draw until they re-plan (written with the cap), and the jobs' plans
    # stayed under 9 W while the first cap held.
    highest, over = 0.0, []
    for cap, planned, _ in watch.samples:
        highest = max(highest, cap)
        if planned > highest + 1e-6:
            over.append((cap, planned))
    assert not over, over[:5]
    first = [p for cap, _planned, p in watch.samples if cap == CAP_W]
    assert first and max(first) <= CAP_W + 1e-6, max(first)
    # After each cap change the planned draw came down to the new cap.
    final_cap, final_planned, _ = watch.samples[-1]
    assert final_planned <= final_cap + 1e-6, watch.samples[-5:]
    reasons = [r for r, _ in _events(kube, namespace, "b3")]
    assert "PowerWithdrawn" in reasons or "WaitingForPower" in reasons, reasons


def _training_with_samples(status: dict[str, Any]) -> bool:
    return bool(status.get("phase") == "Training"
                and (status.get("training") or {}).get("samples", 0) > 0)


def _options(kube: KubeClient, namespace: str, status: dict[str, Any]) -> JobOptions:
    """A job's points as the budget sees them (its profile, the seeded vector, its 5 W)."""
    profile = kube.get(api_path("v1", "configmaps", namespace,
                                status["profiles"][0]["configMap"]))["data"]["profile.csv"]
    eff = kube.get(api_path("v1", "configmaps", namespace,
                            status["efficiency"]["configMap"]))["data"]["efficiency.json"]
    return job_options("b1", Lut.from_points(parse_profile_csv(profile)),
                       parse_efficiency_json(eff), limit_w=5.0)
