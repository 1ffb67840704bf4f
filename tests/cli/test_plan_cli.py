"""`edgetrain plan` as users run it: a real subprocess, real files, exit codes and JSON."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from edgetrain.api import PlanResult
from edgetrain.cli import app
from tests.helpers import run_edgetrain

runner = CliRunner()


def test_plan_json_contract(figure1_files: tuple[Path, Path]) -> None:
    profile, efficiency = figure1_files
    proc = run_edgetrain(
        "plan",
        "--profile",
        str(profile),
        "--efficiency",
        str(efficiency),
        "--power-limit",
        "5",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    for key in ("batch_size", "gpu_freq_hz", "relative_time", "power_w", "baselines"):
        assert key in data
    assert (data["batch_size"], data["gpu_freq_hz"]) == (64, 460_800_000)
    assert set(data["baselines"]) == {"B1", "B2"}
    for key in ("batch_size", "gpu_freq_hz", "relative_time", "power_w"):
        assert key in data["baselines"]["B1"]
    PlanResult.model_validate(data)  # the output is the pydantic contract


def test_plan_table_output(figure1_files: tuple[Path, Path]) -> None:
    profile, efficiency = figure1_files
    result = runner.invoke(
        app,
        [
            "plan",
            "--profile",
            str(profile),
            "--efficiency",
            str(efficiency),
            "--power-limit",
            "5",
            "--baseline-freqs",
            "4.5:307.2MHz,7:614.4MHz",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "edgetrain" in result.output and "B1" in result.output
    assert "460.8" in result.output


def test_infeasible_exits_3_with_one_line(figure1_files: tuple[Path, Path]) -> None:
    profile, efficiency = figure1_files
    proc = run_edgetrain(
        "plan",
        "--profile",
        str(profile),
        "--efficiency",
        str(efficiency),
        "--power-limit",
        "3",
        "--json",
    )
    assert proc.returncode == 3
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "3 W" in lines[0] and "4.100 W" in lines[0]


def test_bad_profile_exits_2_naming_row_and_field(
    figure1_files: tuple[Path, Path], tmp_path: Path
) -> None:
    _, efficiency = figure1_files
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "batch_size,gpu_freq_hz,time_per_sample_s,peak_power_w,mean_power_w\n64,1,0.1,x,1\n"
    )
    proc = run_edgetrain(
        "plan", "--profile", str(bad), "--efficiency", str(efficiency), "--power-limit", "5"
    )
    assert proc.returncode == 2
    assert f"{bad}, row 2, field 'peak_power_w'" in proc.stderr


def test_bad_baseline_freqs_exits_2(figure1_files: tuple[Path, Path]) -> None:
    profile, efficiency = figure1_files
    result = runner.invoke(
        app,
        [
            "plan",
            "--profile",
            str(profile),
            "--efficiency",
            str(efficiency),
            "--power-limit",
            "5",
            "--baseline-freqs",
            "fast",
        ],
    )
    assert result.exit_code == 2
    assert "'fast' is not a frequency" in result.output


def test_no_limit_and_warnings(figure1_files: tuple[Path, Path], tmp_path: Path) -> None:
    profile, _ = figure1_files
    eff = tmp_path / "e.json"
    eff.write_text(
        json.dumps(
            {
                "model": "m",
                "dataset": "d",
                "target_accuracy": 0.9,
                "batch_sizes": [64, 128, 256],
                "samples_to_accuracy": [10.0, 20.0, None],
                "r": [0.5, 1.0, None],
            }
        )
    )
    proc = run_edgetrain(
        "plan",
        "--profile",
        str(profile),
        "--efficiency",
        str(eff),
        "--power-limit",
        "inf",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    assert "batch size 256 is in the efficiency vector but has no profile rows" in proc.stderr
    assert json.loads(proc.stdout)["power_limit_w"] is None


def test_help_documents_the_contract() -> None:
    result = runner.invoke(app, ["plan", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for fragment in (
        "--power-limit",
        "--power-metric",
        "--objective",
        "--baseline-freqs",
        "--json",
        "Exit codes",
        "3 nothing",
    ):
        assert fragment in text
