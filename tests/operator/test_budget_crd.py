"""Against the real API server: the PowerBudget CRD refuses what one object shows (a cap ≤ 0, a
bad schedule, a bad selector) with a 422 naming the field, and admits a good one."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from edgetrain.api.budget import BUDGET_PLURAL
from edgetrain.api.budget_crd import BUDGET_CRD_NAME
from edgetrain.cluster import KubeApiError, KubeClient, api_path
from tests.operator.conftest import GROUP_VERSION

SITE = {"matchLabels": {"edgetrain.io/site": "farm"}}


def budget(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": GROUP_VERSION, "kind": "PowerBudget", "metadata": {"name": name},
            "spec": {"nodeSelector": SITE, "capWatts": 9, **spec}}


@pytest.fixture(scope="module")
def served(kube: KubeClient, crds: None) -> Iterator[None]:
    kube.wait_for(
        api_path("apiextensions.k8s.io/v1", "customresourcedefinitions", name=BUDGET_CRD_NAME),
        lambda crd: any(c["type"] == "Established" and c["status"] == "True"
                        for c in (crd.get("status") or {}).get("conditions") or []),
        timeout_s=30, what="PowerBudget CRD Established")
    deadline = time.monotonic() + 30
    while True:  # a fresh CRD's storage may answer 404 for a moment
        try:
            kube.get(api_path(GROUP_VERSION, BUDGET_PLURAL))
            break
        except KubeApiError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    yield


BAD: dict[str, tuple[dict[str, Any], str]] = {
    "zero cap": ({"capWatts": 0}, "spec.capWatts"),
    "negative cap": ({"capWatts": -3}, "spec.capWatts"),
    "bad time of day": ({"schedule": [{"timeOfDay": "25:00", "watts": 3}]},
                        "spec.schedule[0].timeOfDay"),
    "step without watts": ({"schedule": [{"timeOfDay": "08:00", "watts": 0}]},
                           "spec.schedule[0].watts"),
    "two steps at one time": ({"schedule": [{"timeOfDay": "08:00", "watts": 3},
                                            {"timeOfDay": "08:00", "watts": 4}]},
                              "Duplicate value"),
    "step above the cap": ({"schedule": [{"timeOfDay": "08:00", "watts": 12}]},
                           "at most capWatts"),
    "empty selector": ({"nodeSelector": {}}, "spec.nodeSelector"),
    "In without values": ({"nodeSelector": {"matchExpressions": [{"key": "site",
                                                                  "operator": "In"}]}},
                          "In and NotIn need values"),
    "unknown operator": ({"nodeSelector": {"matchExpressions": [{"key": "site",
                                                                 "operator": "Near"}]}},
                         "operator"),
}


@pytest.mark.parametrize("what", list(BAD))
def test_bad_budgets_are_refused_naming_the_field(kube: KubeClient, served: None,
                                                  what: str) -> None:
    spec, field = BAD[what]
    with pytest.raises(KubeApiError) as err:
        kube.create(api_path(GROUP_VERSION, BUDGET_PLURAL), budget("bad", **spec))
    assert err.value.code == 422, (what, err.value)
    assert field in err.value.message, (what, err.value.message)


def test_a_solar_day_budget_is_admitted(kube: KubeClient, served: None) -> None:
    body = budget("solar-ok", capWatts=9, schedule=[{"timeOfDay": "07:00", "watts": 9},
                                                    {"timeOfDay": "19:00", "watts": 2.5}],
                  objective="makespan")
    path = api_path(GROUP_VERSION, BUDGET_PLURAL)
    try:
        made = kube.create(path, body)
        assert made["metadata"].get("namespace") is None  # cluster-scoped
        assert made["spec"]["nodeSelector"]["matchExpressions"] == []  # defaulted
    finally:
        with contextlib.suppress(KubeApiError):
            kube.delete(api_path(GROUP_VERSION, BUDGET_PLURAL, name="solar-ok"))
