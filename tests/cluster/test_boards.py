"""Board names, counts and the labels a board's node carries (no cluster needed)."""

from __future__ import annotations

import pytest

from edgetrain.cluster.boards import parse_counts, profile


def test_board_counts_and_profiles() -> None:
    assert parse_counts("nano=2,orin=1") == {"jetson-nano": 2, "jetson-orin-nano": 1}
    with pytest.raises(ValueError, match="BOARD=N"):
        parse_counts("nano")
    with pytest.raises(ValueError, match="unknown board"):
        parse_counts("tegra=1")
    nano = profile("nano")
    labels = nano.labels("n0")
    assert labels["edgetrain.io/device-model"] == "jetson-nano"
    assert labels["edgetrain.io/l4t"] == "32.7.1"
    assert labels["kubernetes.io/arch"] == "arm64"
    assert nano.annotations()["edgetrain.io/gpu-frequencies-hz"].startswith("76800000,")
