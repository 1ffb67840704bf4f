"""Status text always fits the CRD's limits, so the API server never refuses a status write."""

from __future__ import annotations

import typing

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from edgetrain.api.job_status import (
    MAX_STRING,
    Condition,
    Phase,
    PowerAwareTrainingJobStatus,
    fit_string,
)


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_a_5000_character_crash_message_is_cut_to_the_limit_keeping_its_end() -> None:
    crash = "Traceback (most recent call last):\n" + "  frame\n" * 620 + "ValueError: the cause"
    assert len(crash) > 5000
    status = PowerAwareTrainingJobStatus(
        phase=Phase.failed,
        message=crash,
        reason="EstimateFailed",
        conditions=[Condition(type="Failed", status="True", reason="X", message=crash)],
    )
    wire = status.wire()
    assert all(len(s) <= MAX_STRING for s in _strings(wire))
    assert wire["message"].startswith("Traceback")
    assert wire["message"].endswith("ValueError: the cause")  # what failed survives the cut
    assert wire["conditions"][0]["message"] == wire["message"]


@pytest.mark.parametrize("n", [0, 1, MAX_STRING - 1, MAX_STRING])
def test_strings_within_the_limit_are_untouched(n: int) -> None:
    assert fit_string("x" * n) == "x" * n


@given(st.text(min_size=0, max_size=6000), st.integers(min_value=400, max_value=2000))
def test_fit_string_never_exceeds_the_limit(text: str, limit: int) -> None:
    out = fit_string(text, limit)
    assert len(out) <= limit
    assert out == text or (out.startswith(text[:50]) and out.endswith(text[-50:]))


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> set[type[BaseModel]]:
    """`model` and every model its fields hold (through lists, dicts and unions)."""
    if model in seen:
        return seen
    seen.add(model)
    todo = [f.annotation for f in model.model_fields.values()]
    while todo:
        tp = todo.pop()
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            _models(tp, seen)
        todo += list(typing.get_args(tp))
    return seen


def test_no_status_field_is_required_and_nullable() -> None:
    """`wire()` drops nulls, and the CRD requires every field without a default: a nullable field
    without one is a status the API server refuses (422), and the job stalls."""
    bad = [f"{m.__name__}.{name}" for m in _models(PowerAwareTrainingJobStatus, set())
           for name, f in m.model_fields.items()
           if f.is_required() and type(None) in typing.get_args(f.annotation)]
    assert not bad, bad
