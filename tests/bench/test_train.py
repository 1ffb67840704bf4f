"""`edgetrain bench train --quick`: the JSON shape, and that both loops really trained."""

from __future__ import annotations

import json

from tests.helpers import run_edgetrain


def test_quick_bench_trains_both_loops_on_the_same_samples() -> None:
    proc = run_edgetrain("bench", "train", "--quick", "--json", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert {"command", "machine", "rows", "target_ratio", "unmeasured_devices"} <= set(result)
    assert [(r["model"], r["batch_size"]) for r in result["rows"]] == [
        ("resnet8-w025", 8),
        ("resnet8-w025", 32),
    ]
    for row in result["rows"]:
        assert row["device"] == "cpu"
        assert row["edgetrain_samples_per_s"] > 0 and row["plain_samples_per_s"] > 0
        assert len(row["ratios"]) == row["repeats"] and row["ratio"] > 0
        # Both loops saw the same number of samples, (warm-up + repeats) segments of steps.
        expected = (2 + row["repeats"] * row["steps_per_segment"]) * row["batch_size"]
        assert row["edgetrain_samples"] == row["plain_samples"] == expected
        assert row["edgetrain_loss_after"] < row["edgetrain_loss_before"]
        assert row["plain_loss_after"] < row["plain_loss_before"]


def test_unknown_model_is_bad_input() -> None:
    proc = run_edgetrain("bench", "train", "--models", "resnet9000", "--json")
    assert proc.returncode == 2
    assert "unknown ['resnet9000']" in proc.stderr
