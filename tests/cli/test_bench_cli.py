"""`edgetrain bench planner` runs and reports ratios (timings are reported, never asserted)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from edgetrain.cli import app


def test_bench_planner_json_lines() -> None:
    result = CliRunner().invoke(
        app, ["bench", "planner", "--modes", "12,200", "--repeats", "2", "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [(r["modes"], r["monotone"]) for r in rows] == [
        (12, True),
        (12, False),
        (200, True),
        (200, False),
    ]
    for r in rows:
        assert r["points"] == 8 * r["modes"]
        assert r["speedup"] == r["exhaustive_select_s"] / r["fast_select_s"]


def test_bench_planner_table() -> None:
    result = CliRunner().invoke(app, ["bench", "planner", "--modes", "12", "--repeats", "1"])
    assert result.exit_code == 0, result.output
    assert "8×12" in result.output and "speedup" in result.output


def test_bench_rejects_bad_sizes() -> None:
    result = CliRunner().invoke(app, ["bench", "planner", "--modes", "a,b"])
    assert result.exit_code == 2
