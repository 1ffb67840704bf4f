"""PowerBudget helpers shared by the budget end-to-end tests (the operator process,
tests/operator/test_budget_e2e.py) and the fault suite's chart-installed fleet
(tests/faults): create a budget, change its cap, sample its status, and a job's points as
the budget sees them."""

from __future__ import annotations

import time
from typing import Any

from edgetrain.api.budget import ANNOTATION_POWER_ALLOCATION, BUDGET_PLURAL
from edgetrain.api.efficiency import parse_efficiency_json
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.api.keys import LABEL_CACHE, LABEL_CACHE_KEY, LABEL_DEVICE_MODEL, LABEL_L4T
from edgetrain.api.profile import parse_profile_csv
from edgetrain.bench.budget_live import InBackground
from edgetrain.bench.operator_worker import profile_files
from edgetrain.cluster import KubeApiError, KubeClient, api_path
from edgetrain.operator import manifests as mf
from edgetrain.planner.budget import JobOptions, job_options
from edgetrain.planner.lut import Lut
from edgetrain.workloads import workload_cost
from edgetrain.workloads.training import load_task
from tests.operator.conftest import GROUP_VERSION, patj_path


def budget_path(name: str | None = None) -> str:
    """REST path of PowerBudgets (cluster-scoped)."""
    return api_path(GROUP_VERSION, BUDGET_PLURAL, name=name)


def create_budget(kube: KubeClient, name: str, labels: dict[str, str], cap_w: float) -> None:
    """A PowerBudget over the nodes carrying `labels`."""
    kube.create(budget_path(), {"apiVersion": GROUP_VERSION, "kind": "PowerBudget",
                                "metadata": {"name": name},
                                "spec": {"nodeSelector": {"matchLabels": labels},
                                         "capWatts": cap_w}})


def get_budget(kube: KubeClient, name: str) -> dict[str, Any]:
    return kube.get(budget_path(name))


def set_cap(kube: KubeClient, name: str, watts: float) -> None:
    kube.patch(budget_path(name), {"spec": {"capWatts": watts}})


def seed_profile(kube: KubeClient, namespace: str, spec: dict[str, Any], node: str) -> str:
    """The job's profile for `node`'s device model in the namespace's cache, from the twin's
    noise-free physics as the operator bench makes it (simulated), so its profiling is a cache
    hit; the ConfigMap's name.

    A point profiled on a CPU-starved twin can read as low as the node's idle draw, and then no
    cap above the site's idle draw fits two jobs but not three (profiling is tested elsewhere)."""
    parsed = PowerAwareTrainingJobSpec.model_validate(spec)
    labels = kube.get(api_path("v1", "nodes", name=node))["metadata"]["labels"]
    board, l4t = labels[LABEL_DEVICE_MODEL], labels.get(LABEL_L4T)
    key = mf.profile_key(parsed, board, l4t)
    task = load_task(parsed.dataset.name, parsed.dataset.limit)
    cost = workload_cost(parsed.model.architecture, tuple(task.x_train.shape[1:]),
                         task.num_classes)
    name = mf.profile_configmap_name(key)
    kube.create(api_path("v1", "configmaps", namespace), {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {LABEL_CACHE: "profile", LABEL_CACHE_KEY: key}},
        "data": profile_files(parsed, board, l4t, cost, work_s=0.0)})
    return name


def training_with_samples(status: dict[str, Any]) -> bool:
    """Training, past its first checkpoint (where a held job stays)."""
    return bool(status.get("phase") == "Training"
                and (status.get("training") or {}).get("samples", 0) > 0)


def site_options(kube: KubeClient, namespace: str, status: dict[str, Any], name: str,
                 limit_w: float = 5.0) -> JobOptions:
    """A job's points as the budget sees them (its profile, its efficiency vector, its own
    limit), from the ConfigMaps its status names."""
    profile = kube.get(api_path("v1", "configmaps", namespace,
                                status["profiles"][0]["configMap"]))["data"]["profile.csv"]
    eff = kube.get(api_path("v1", "configmaps", namespace,
                            status["efficiency"]["configMap"]))["data"]["efficiency.json"]
    return job_options(name, Lut.from_points(parse_profile_csv(profile)),
                       parse_efficiency_json(eff), limit_w=limit_w)


class Sampler(InBackground):
    """Calls `sample` every 0.2 s in a thread while the `with` block runs."""

    def __init__(self) -> None:
        super().__init__("sampler")

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.sample()

    def sample(self) -> None:
        raise NotImplementedError


class BudgetWatch(Sampler):
    """Samples the budget's status and the jobs' plans every 0.2 s in a thread."""

    def __init__(self, kube: KubeClient, budget: str, namespace: str) -> None:
        super().__init__()
        self.kube, self.budget, self.namespace = kube, budget, namespace
        # (monotonic s, cap, planned, Σ training jobs' planned powerWatts)
        self.samples: list[tuple[float, float, float, float]] = []
        # Each sample's view, for a failure to tell: the budget's message and allocations, and
        # per job its phase, plan (W, limit W) and the grant annotation it holds.
        self.views: list[str] = []

    def sample(self) -> None:
        try:
            st = get_budget(self.kube, self.budget).get("status") or {}
            items = self.kube.get(patj_path(self.namespace))["items"]
        except KubeApiError:
            return
        plans = sum((o.get("status", {}).get("selection") or {}).get("powerWatts", 0.0)
                    for o in items if o.get("status", {}).get("phase") == "Training")
        if st.get("plannedWatts") is not None:
            self.samples.append((time.monotonic(), st["capWatts"], st["plannedWatts"], plans))
            jobs = "; ".join(
                f"{o['metadata']['name']} {(o.get('status') or {}).get('phase')} plan "
                f"{sel.get('powerWatts')}/{sel.get('powerLimitWatts')} W grant "
                f"{(o['metadata'].get('annotations') or {}).get(ANNOTATION_POWER_ALLOCATION)}"
                for o in items for sel in [(o.get("status") or {}).get("selection") or {}])
            allocations = [(a.get("name"), a.get("watts")) for a in st.get("allocations") or []]
            self.views.append(f"cap {st['capWatts']} planned {st['plannedWatts']} "
                              f"{allocations} {st.get('message') or ''} | {jobs}")

    def _over_cap_at(self) -> list[int]:
        """Indexes of the samples whose planned draw passed the highest cap so far: after a
        lowered cap the plan still counts what running jobs draw until they re-plan (it is
        written with the cap), so only the highest cap so far bounds every sample."""
        highest, over = 0.0, []
        for i, (_t, cap, planned, _plans) in enumerate(self.samples):
            highest = max(highest, cap)
            if planned > highest + 1e-6:
                over.append(i)
        return over

    def over_cap(self) -> list[tuple[float, float]]:
        """(cap, planned) of the samples over the highest cap so far."""
        return [(self.samples[i][1], self.samples[i][2]) for i in self._over_cap_at()]

    def around_first_over_cap(self, before: int = 6) -> str:
        """The views from a few samples before the first over-cap sample to it."""
        over = self._over_cap_at()
        return "\n".join(self.views[max(0, over[0] - before):over[0] + 1]) if over else ""
