"""The state file: atomic, round-trips, and refuses to guess when corrupt."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgetrain.node_agent.state import PinState, load_state, save_state


def test_missing_file_is_empty_state(tmp_path: Path) -> None:
    assert not load_state(tmp_path / "none.json").holding


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "d" / "state.json"
    st = PinState(node="n", saved_min_hz=1, saved_max_hz=9, applied_min_hz=5, applied_max_hz=5,
                  owner="ns/p", guard_cap_hz=4, guard_signature=[5.0, 6.5], guard_steps=1)
    save_state(path, st)
    back = load_state(path)
    assert back == st and back.holding
    assert not list(path.parent.glob(".state.json.*"))  # no temp files left


def test_corrupt_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="fix or remove it"):
        load_state(path)
