"""PowerBudget: one power feed shared by a site's nodes (spec and status; the CRD's source)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from edgetrain.api.enums import StrEnum
from edgetrain.api.job import API_VERSION
from edgetrain.api.job_status import Condition
from edgetrain.api.names import LABEL_KEY_PATTERN, LABEL_VALUE_MAX, LABEL_VALUE_PATTERN

BUDGET_KIND = "PowerBudget"
BUDGET_PLURAL = "powerbudgets"
BUDGET_API_VERSION = API_VERSION
TIME_OF_DAY_PATTERN = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
# On a job the budget covers: a notification of its share, written by the operator's budget
# loop after the budget's status records it (JSON: {"budget": name, "watts": W or null,
# "node": where, "seq": the grant's sequence number, "purpose": "profile" when it is a sweep
# ceiling, "reason": why it waits}).
ANNOTATION_POWER_ALLOCATION = "edgetrain.io/power-allocation"
GrantPurpose = Literal["train", "profile"]

LabelKey = Annotated[str, Field(pattern=LABEL_KEY_PATTERN, max_length=317)]
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE_PATTERN, max_length=LABEL_VALUE_MAX)]


class _Spec(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


class SelectorOperator(StrEnum):
    """A label selector requirement's operator (Kubernetes' set-based selectors)."""

    in_ = "In"
    not_in = "NotIn"
    exists = "Exists"
    does_not_exist = "DoesNotExist"


class LabelSelectorRequirement(_Spec):
    """One set-based requirement, as in a Kubernetes LabelSelector."""

    key: LabelKey
    operator: SelectorOperator
    values: list[LabelValue] = Field(default_factory=list, max_length=64)

    @model_validator(mode="after")
    def _values_fit_operator(self) -> LabelSelectorRequirement:
        needs = self.operator in (SelectorOperator.in_, SelectorOperator.not_in)
        if needs and not self.values:
            raise ValueError(f"operator {self.operator.value} needs at least one value")
        if not needs and self.values:
            raise ValueError(f"operator {self.operator.value} takes no values")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` meet this requirement."""
        has = self.key in labels
        if self.operator is SelectorOperator.in_:
            return has and labels[self.key] in self.values
        if self.operator is SelectorOperator.not_in:
            return not has or labels[self.key] not in self.values
        return has if self.operator is SelectorOperator.exists else not has


class LabelSelector(_Spec):
    """A standard Kubernetes label selector (every clause must hold; empty selects nothing)."""

    match_labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=32)
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=32)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with `labels` is selected. An empty selector selects no node: a budget
        over the whole cluster by accident would throttle every job."""
        if not self.match_labels and not self.match_expressions:
            return False
        return (all(labels.get(k) == v for k, v in self.match_labels.items())
                and all(e.matches(labels) for e in self.match_expressions))


class ScheduleStep(_Spec):
    """From `timeOfDay` (UTC, HH:MM) on, the cap is `watts`, until the next step."""

    time_of_day: str = Field(pattern=TIME_OF_DAY_PATTERN, max_length=5)
    watts: float = Field(gt=0)


class PowerBudgetSpec(_Spec):
    """A site's power feed: which nodes share it and how much it gives."""

    node_selector: LabelSelector
    cap_watts: float = Field(gt=0, description="the feed's cap (W) when no schedule step"
                             " applies, and the most any step may give")
    schedule: list[ScheduleStep] = Field(default_factory=list, max_length=96)
    objective: Literal["sum", "makespan"] = Field(
        default="sum", description="minimise the jobs' summed predicted time-to-accuracy, or"
        " the longest one")

    @model_validator(mode="after")
    def _schedule_valid(self) -> PowerBudgetSpec:
        times = [s.time_of_day for s in self.schedule]
        if len(set(times)) != len(times):
            raise ValueError(f"schedule times must be unique, got {times}")
        over = [s for s in self.schedule if s.watts > self.cap_watts]
        if over:
            raise ValueError(f"schedule step {over[0].time_of_day} gives {over[0].watts:g} W,"
                             f" above capWatts {self.cap_watts:g} W")
        return self

    def cap_at(self, seconds_of_day: float) -> float:
        """The cap in effect at a UTC time of day: the latest step at or before it (the day's
        last step carries over midnight); capWatts without a schedule."""
        if not self.schedule:
            return self.cap_watts
        steps = sorted(self.schedule, key=lambda s: s.time_of_day)
        now = _minutes(seconds_of_day)
        current = steps[-1]
        for step in steps:
            if _step_minutes(step) <= now:
                current = step
        return current.watts

    def next_change_s(self, seconds_of_day: float) -> float | None:
        """Seconds until the next schedule step (None without a schedule)."""
        if not self.schedule:
            return None
        now = seconds_of_day
        ahead = [(_step_minutes(s) * 60 - now) % 86_400 for s in self.schedule]
        return min(a if a > 0 else 86_400.0 for a in ahead)


def _minutes(seconds_of_day: float) -> int:
    return int(seconds_of_day // 60) % 1440


def _step_minutes(step: ScheduleStep) -> int:
    hours, minutes = step.time_of_day.split(":")
    return int(hours) * 60 + int(minutes)


class _Status(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class BudgetAllocationStatus(_Status):
    """One job's share of the budget: the grant issued last, and what the job may still draw."""

    namespace: str
    name: str
    node: str = ""
    watts: float | None = Field(default=None, description="granted power (W); null: waiting")
    purpose: GrantPurpose = Field(default="train", description="train: a plan's share;"
                                  " profile: the ceiling of a profiling sweep")
    sequence: int = Field(default=0, ge=0, description="sequence number of the grant issued"
                          " last (0: none yet)")
    acknowledged: int = Field(default=0, ge=0, description="the sequence the job echoes: it"
                              " plans under that grant")
    held_watts: float | None = Field(
        default=None, description="the most the job may still act on: every grant issued since"
        " the one it acknowledged (null: none)")
    batch_size: int | None = None
    gpu_frequency_hz: int | None = None
    predicted_seconds: float | None = None
    message: str = ""


class PowerBudgetStatus(_Status):
    """What the operator planned under the budget."""

    cap_watts: float | None = Field(default=None, description="the cap now (schedule applied)")
    idle_watts: float | None = Field(default=None,
                                     description="idle draw of the site's nodes running no job")
    planned_watts: float | None = Field(default=None, description="the planned site draw")
    authorised_watts: float | None = Field(
        default=None, description="the invariant's sum, kept ≤ the cap: per node the highest"
        " limit anything there may still act on (held grants, pods that have not ended,"
        " profiling ceilings), else its idle draw")
    profiling_watts: float | None = Field(
        default=None, description="what profiling sweeps may take of the cap now")
    sequence: int = Field(default=0, ge=0, description="the last grant sequence issued")
    measured_watts: float | None = Field(
        default=None, description="the site's measured draw: the node agents' last board power "
        "readings summed (partial when unmeasuredNodes is not empty)")
    measured_at: str | None = Field(default=None, description="when measuredWatts was read")
    unmeasured_nodes: list[str] = Field(
        default_factory=list,
        description="the budget's nodes whose node agent could not be read: measuredWatts "
        "leaves them out")
    nodes: list[str] = Field(default_factory=list)
    jobs: int = 0
    waiting: int = 0
    allocations: list[BudgetAllocationStatus] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)
    message: str = ""
    observed_generation: int | None = None


@dataclass(frozen=True)
class GrantNotice:
    """A job's share as its annotation notifies it (the budget's status is the record)."""

    budget: str
    watts: float | None
    reason: str = ""
    node: str = ""
    sequence: int = 0
    purpose: GrantPurpose = "train"


def allocation_annotation(budget: str, watts: float | None, reason: str = "",
                          node: str = "", sequence: int = 0,
                          purpose: GrantPurpose = "train") -> str:
    """The job annotation carrying its share (compact JSON): the node it was granted on."""
    body: dict[str, object] = {"budget": budget, "watts": watts}
    if node and watts is not None:
        body["node"] = node
    if sequence:
        body["seq"] = sequence
    if purpose != "train":
        body["purpose"] = purpose
    if reason:
        body["reason"] = reason
    return json.dumps(body, separators=(",", ":"))


def parse_allocation(text: str | None) -> GrantNotice | None:
    """The notice in the annotation; None when absent or unreadable."""
    if not text:
        return None
    try:
        body = json.loads(text)
        watts = body.get("watts")
        purpose = body.get("purpose", "train")
        return GrantNotice(
            budget=str(body["budget"]), watts=None if watts is None else float(watts),
            reason=str(body.get("reason", "")), node=str(body.get("node") or ""),
            sequence=int(body.get("seq", 0)),
            purpose="profile" if purpose == "profile" else "train")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def allocation_node(text: str | None) -> str:
    """The node a share was granted on ("" when none or unreadable)."""
    notice = parse_allocation(text)
    return notice.node if notice is not None else ""
