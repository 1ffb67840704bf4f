"""PowerBudget models: selectors, schedules, the allocation annotation, the generated CRD."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from edgetrain.api.budget import (
    GrantNotice,
    LabelSelector,
    PowerBudgetSpec,
    allocation_annotation,
    parse_allocation,
)
from edgetrain.api.budget_crd import budget_crd, budget_spec_schema

SITE = {"matchLabels": {"site": "farm"}}


def spec(**over: object) -> PowerBudgetSpec:
    return PowerBudgetSpec.model_validate({"nodeSelector": SITE, "capWatts": 9, **over})


@pytest.mark.parametrize(("selector", "labels", "selected"), [
    ({"matchLabels": {"site": "farm"}}, {"site": "farm", "x": "1"}, True),
    ({"matchLabels": {"site": "farm"}}, {"site": "barn"}, False),
    ({"matchExpressions": [{"key": "site", "operator": "In", "values": ["a", "b"]}]},
     {"site": "b"}, True),
    ({"matchExpressions": [{"key": "site", "operator": "NotIn", "values": ["a"]}]}, {}, True),
    ({"matchExpressions": [{"key": "site", "operator": "Exists"}]}, {"site": ""}, True),
    ({"matchExpressions": [{"key": "site", "operator": "DoesNotExist"}]}, {"site": "a"}, False),
    ({"matchLabels": {"site": "farm"},
      "matchExpressions": [{"key": "rack", "operator": "In", "values": ["1"]}]},
     {"site": "farm", "rack": "2"}, False),
    ({}, {"site": "farm"}, False),  # empty selects nothing
])
def test_label_selector(selector: dict[str, object], labels: dict[str, str],
                        selected: bool) -> None:
    assert LabelSelector.model_validate(selector).matches(labels) is selected


@pytest.mark.parametrize(("over", "message"), [
    ({"capWatts": 0}, "greater than 0"),
    ({"schedule": [{"timeOfDay": "24:00", "watts": 3}]}, "timeOfDay"),
    ({"schedule": [{"timeOfDay": "08:00", "watts": 3}, {"timeOfDay": "08:00", "watts": 4}]},
     "unique"),
    ({"schedule": [{"timeOfDay": "08:00", "watts": 12}]}, "above capWatts 9 W"),
    ({"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}, "needs at least"),
    ({"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Exists",
                                              "values": ["x"]}]}}, "takes no values"),
])
def test_bad_specs_say_what_is_wrong(over: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(**over)


def test_schedule_steps_and_midnight_carry_over() -> None:
    solar = spec(schedule=[{"timeOfDay": "18:00", "watts": 2}, {"timeOfDay": "07:30", "watts": 9},
                           {"timeOfDay": "12:00", "watts": 6}])
    hour = 3600.0
    assert solar.cap_at(3 * hour) == 2  # yesterday's 18:00 step
    assert solar.cap_at(7.5 * hour) == 9 and solar.cap_at(12 * hour - 1) == 9
    assert solar.cap_at(13 * hour) == 6 and solar.cap_at(23 * hour) == 2
    assert solar.next_change_s(7.5 * hour) == 4.5 * hour
    assert solar.next_change_s(19 * hour) == 12.5 * hour
    assert spec().cap_at(5.0) == 9 and spec().next_change_s(5.0) is None


def test_allocation_annotation_round_trip() -> None:
    assert parse_allocation(allocation_annotation("site", 3.25)) == GrantNotice("site", 3.25)
    assert parse_allocation(allocation_annotation("site", None, "no room")) == GrantNotice(
        "site", None, "no room")
    sweep = allocation_annotation("site", 5.0, node="n2", sequence=7, purpose="profile")
    assert parse_allocation(sweep) == GrantNotice("site", 5.0, "", "n2", 7, "profile")
    assert parse_allocation("{not json") is None and parse_allocation(None) is None
    assert parse_allocation('{"budget": "site", "watts": 1, "seq": "x"}') is None


def test_crd_is_cluster_scoped_with_server_side_checks() -> None:
    crd = budget_crd()
    assert crd["spec"]["scope"] == "Cluster"
    version = crd["spec"]["versions"][0]
    cols = [c["name"] for c in version["additionalPrinterColumns"]]
    assert cols[:7] == ["Cap W", "Planned W", "Authorised W", "Measured W", "Idle W", "Jobs",
                        "Waiting"]
    props = budget_spec_schema()["properties"]
    assert props["capWatts"]["exclusiveMinimum"] is True and props["capWatts"]["minimum"] == 0
    assert props["schedule"]["x-kubernetes-list-map-keys"] == ["timeOfDay"]
    step = props["schedule"]["items"]["properties"]
    assert step["timeOfDay"]["pattern"].startswith("^([01]")
    assert step["watts"]["exclusiveMinimum"] is True
    expr = props["nodeSelector"]["properties"]["matchExpressions"]["items"]
    assert expr["properties"]["operator"]["enum"] == ["In", "NotIn", "Exists", "DoesNotExist"]
