"""The status patch the handlers send: minimal, and able to delete fields."""

from __future__ import annotations

from edgetrain.operator.handlers import merge_diff


def test_merge_diff() -> None:
    old = {"phase": "Training", "attempts": {"estimate": 1, "nextRetryAt": 5.0},
           "conditions": [{"type": "A"}], "message": "x"}
    new = {"phase": "Training", "attempts": {"estimate": 1}, "conditions": [{"type": "A"}],
           "reason": "r"}
    assert merge_diff(old, new) == {"attempts": {"nextRetryAt": None}, "message": None,
                                    "reason": "r"}
    assert merge_diff(new, new) == {}
