"""`edgetrain profile` and `edgetrain train` on a live Jetson Nano twin (all figures simulated)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgetrain.api import read_profile
from edgetrain.api.profile import read_profile_metadata
from edgetrain.device import GpuDevfreq
from edgetrain.device.errors import SensorReadError
from edgetrain.device.sim import DeviceTwin, ground_truth
from edgetrain.workloads import workload_cost
from tests.helpers import FAST_PROFILE_ARGS, run_edgetrain

FREQS = "76.8MHz,230.4MHz,460.8MHz,921.6MHz"


def test_frontier_profile_measures_fewer_points_and_restores(
    nano: DeviceTwin, tmp_path: Path
) -> None:
    node = GpuDevfreq.discover(nano.root)
    before = node.current_range()
    out = tmp_path / "nano.csv"
    proc = run_edgetrain(
        "profile",
        "--model",
        "resnet8-w025",
        "--dataset",
        "digits",
        "--batch-sizes",
        "8,128",
        "--gpu-freqs",
        FREQS,
        "--power-limit",
        "2.45",
        "--sysfs-root",
        str(nano.root),
        "-o",
        str(out),
        "--json-progress",
        *FAST_PROFILE_ARGS,
    )
    assert proc.returncode == 0, proc.stderr
    points = read_profile(out)
    meta = read_profile_metadata(out)
    assert meta is not None and meta.simulated and meta.device_model == "jetson-nano"
    assert meta.grid_points == 8
    assert meta.measured_points == len(points) < 8
    assert points[0].batch_size == 128 and points[0].gpu_freq_hz == 76_800_000
    # Simulated times are the twin's model; power is what the sampler read from the tree.
    truth = ground_truth(
        "jetson-nano",
        workload_cost("resnet8-w025", input_shape=(1, 28, 28), num_classes=10),
        128,
        76_800_000,
    )
    assert points[0].time_per_sample_s == pytest.approx(truth.time_per_sample_s, rel=1e-6)
    assert points[0].peak_power_w == pytest.approx(truth.peak_power_w, rel=0.1)
    assert "(simulated)" in proc.stderr
    time.sleep(0.05)
    assert node.current_range() == before


def test_full_profile_measures_the_grid(nano: DeviceTwin, tmp_path: Path) -> None:
    out = tmp_path / "full.csv"
    proc = run_edgetrain(
        "profile",
        "--model",
        "resnet8-w025",
        "--dataset",
        "digits",
        "--batch-sizes",
        "8",
        "--gpu-freqs",
        "76.8MHz,921.6MHz",
        "--strategy",
        "full",
        "--sysfs-root",
        str(nano.root),
        "-o",
        str(out),
        *FAST_PROFILE_ARGS,
    )
    assert proc.returncode == 0, proc.stderr
    assert [(p.batch_size, p.gpu_freq_hz) for p in read_profile(out)] == [
        (8, 76_800_000),
        (8, 921_600_000),
    ]


def test_sigterm_restores_the_frequency_range(nano: DeviceTwin, tmp_path: Path) -> None:
    node = GpuDevfreq.discover(nano.root)
    before = node.current_range()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgetrain",
            "profile",
            "--model",
            "resnet8-w025",
            "--dataset",
            "digits",
            "--batch-sizes",
            "8,16,32,64",
            "--strategy",
            "full",
            "--sysfs-root",
            str(nano.root),
            "-o",
            str(tmp_path / "x.csv"),
            "--json-progress",
            *FAST_PROFILE_ARGS,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if json.loads(line)["event"] == "progress":
            break
    deadline = time.monotonic() + 5
    while (now := node.current_range()).min_freq_hz != now.max_freq_hz:  # pinned by the run
        assert time.monotonic() < deadline, now
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode != 0
    # The live twin rewrites its devfreq files on every tick; a read may land on a torn write.
    deadline = time.monotonic() + 5
    while True:
        try:
            if (now := node.current_range()) == before:
                break
        except SensorReadError:
            now = None
        assert time.monotonic() < deadline, now
        time.sleep(0.01)
    assert not (tmp_path / "x.csv").exists()


def test_bad_frequency_lists_the_table(nano: DeviceTwin, tmp_path: Path) -> None:
    proc = run_edgetrain(
        "profile",
        "--model",
        "resnet8-w025",
        "--dataset",
        "digits",
        "--batch-sizes",
        "8",
        "--gpu-freqs",
        "500MHz",
        "--sysfs-root",
        str(nano.root),
        "-o",
        str(tmp_path / "p.csv"),
    )
    assert proc.returncode == 2
    assert "500 MHz" in proc.stderr and "460.8" in proc.stderr


def test_train_on_twin_reports_simulated_device_time_and_energy(
    nano: DeviceTwin, tmp_path: Path
) -> None:
    proc = run_edgetrain(
        "train",
        "--model",
        "resnet8-w025",
        "--dataset",
        "digits",
        "--batch-size",
        "32",
        "--target-accuracy",
        "0.99",
        "--sample-budget",
        "640",
        "--eval-interval",
        "320",
        "--eval-samples",
        "100",
        "--gpu-freq",
        "460.8MHz",
        "--sysfs-root",
        str(nano.root),
        "--checkpoint-dir",
        str(tmp_path / "ck"),
        "--json-progress",
    )
    assert proc.returncode == 4, proc.stderr  # budget exhausted before 99 %
    usage = json.loads(proc.stdout.splitlines()[-1])["usage"]
    truth = ground_truth(
        "jetson-nano",
        workload_cost("resnet8-w025", input_shape=(1, 28, 28), num_classes=10),
        32,
        460_800_000,
    )
    assert usage["simulated"] is True
    assert usage["device_time_s"] == pytest.approx(20 * truth.time_per_batch_s, rel=1e-6)
    assert usage["energy_j"] == pytest.approx(usage["device_time_s"] * truth.mean_power_w, rel=0.25)
    assert usage["peak_power_w"] >= truth.mean_power_w * 0.95
    assert GpuDevfreq.discover(nano.root).current_range().min_freq_hz == 76_800_000
