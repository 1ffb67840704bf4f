"""`edgetrain device info` and `edgetrain device sim` through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from edgetrain.cli.device import app
from edgetrain.device.sim import DeviceTwin
from edgetrain.workloads import workload_cost

runner = CliRunner()


def test_info_json_on_a_twin(tmp_path: Path) -> None:
    with DeviceTwin("jetson-nano", tmp_path, noise_rel=0.0, cost_of=workload_cost) as twin:
        twin.set_workload("resnet18", 64)
        result = runner.invoke(app, ["info", "--sysfs-root", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["simulated"] is True
    assert data["board"]["board_id"] == "jetson-nano" and data["board"]["l4t"] == "32.7.1"
    assert data["gpu"]["available_frequencies_hz"][0] == 76_800_000
    assert data["gpu"]["cur_freq_hz"] == 921_600_000
    assert [r["name"] for r in data["power"]["rails"]] == ["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"]
    assert data["power"]["total_rule"] == "POM_5V_IN"
    assert data["power"]["total_power_w"] > 1.0
    assert {z["name"] for z in data["thermal"]} >= {"GPU-therm", "CPU-therm"}


def test_info_table_labels_simulated(tmp_path: Path) -> None:
    with DeviceTwin("jetson-agx-orin", tmp_path, noise_rel=0.0, cost_of=workload_cost):
        result = runner.invoke(app, ["info", "--sysfs-root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "(simulated)" in result.stdout and "sum of rails" in result.stdout


def test_info_on_real_fixture_is_not_simulated(nano_tree: Path) -> None:
    result = runner.invoke(app, ["info", "--sysfs-root", str(nano_tree), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["simulated"] is False


def test_info_with_nothing_there_fails(tmp_path: Path) -> None:
    result = runner.invoke(app, ["info", "--sysfs-root", str(tmp_path), "--json"])
    assert result.exit_code == 1


def test_sim_builds_a_live_tree(tmp_path: Path) -> None:
    root = tmp_path / "twin"
    result = runner.invoke(
        app,
        [
            "sim",
            "--model",
            "jetson-xavier-nx",
            "--root",
            str(root),
            "--workload",
            "resnet8",
            "--batch-size",
            "32",
            "--gpu-freq-mhz",
            "510",
            "--duration-s",
            "0.3",
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"EDGETRAIN_SYSFS_ROOT={root.resolve()}" in result.stdout
    info = runner.invoke(app, ["info", "--sysfs-root", str(root), "--json"])
    data = json.loads(info.stdout)
    assert data["gpu"]["min_freq_hz"] == data["gpu"]["max_freq_hz"] == 510_000_000
    bad = runner.invoke(
        app,
        [
            "sim",
            "--model",
            "jetson-nano",
            "--root",
            str(tmp_path / "b"),
            "--gpu-freq-mhz",
            "500",
            "--duration-s",
            "0.1",
        ],
    )
    assert bad.exit_code == 2 and "valid frequencies" in bad.output
    unknown = runner.invoke(app, ["sim", "--model", "jetson-xyz", "--root", str(tmp_path / "c")])
    assert unknown.exit_code == 2
