"""Sampler figures against the twin's known power trace; stabilisation after a step change."""

from __future__ import annotations

import itertools
import statistics
import time
from pathlib import Path

import pytest

from edgetrain.device import (
    GpuDevfreq,
    PowerSample,
    PowerSampler,
    SysfsPowerSensor,
    find_stable_time,
)
from edgetrain.device.sampler import relative_spread, summarize
from edgetrain.device.sim import DeviceTwin
from edgetrain.workloads import workload_cost


class _Ramp:
    """A synthetic source: power = t (W) on the monotonic clock since creation."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def read_total_w(self) -> float:
        return time.monotonic() - self.t0

    def read(self) -> object:  # pragma: no cover - the sampler uses read_total_w
        raise NotImplementedError


def test_summarize_trapezoid_energy() -> None:
    samples = [PowerSample(timestamp_s=t, power_w=p) for t, p in [(0, 1), (1, 3), (2, 3), (4, 1)]]
    stats = summarize(samples)
    assert stats.peak_power_w == 3
    assert stats.energy_j == pytest.approx(2 + 3 + 4)
    assert stats.duration_s == 4
    assert stats.mean_power_w == pytest.approx(9 / 4)  # the energy over the window
    # Samples bunched in a busy second (a delayed sampler thread) weigh by the time they hold:
    # a plain average would read 12/5 = 2.4 W.
    bunched = summarize([PowerSample(timestamp_s=t, power_w=p)
                         for t, p in [(0, 4), (0.01, 4), (0.02, 4), (1, 0), (2, 0)]])
    assert bunched.mean_power_w == pytest.approx((0.02 * 4 + 0.98 * 2) / 2)
    with pytest.raises(ValueError, match="no power samples"):
        summarize([])


def test_sampler_interval_and_window() -> None:
    with PowerSampler(_Ramp(), interval_s=0.01) as sampler:  # type: ignore[arg-type]
        assert sampler.wait_for_samples(20)
    samples = sampler.samples()
    gaps = [b.timestamp_s - a.timestamp_s for a, b in itertools.pairwise(samples)]
    assert statistics.median(gaps) == pytest.approx(0.01, rel=0.5)
    stats = summarize(samples)
    # a ramp: trapezoid energy is exact, mean equals the midpoint
    t0, t1 = samples[0].power_w, samples[-1].power_w
    assert stats.energy_j == pytest.approx((t1**2 - t0**2) / 2, rel=0.05)


def test_sampler_matches_twin_trace(tmp_path: Path) -> None:
    with DeviceTwin(
        "jetson-nano",
        tmp_path,
        tick_s=0.005,
        noise_rel=0.01,
        power_settle_tau_s=0.0,
        seed=7,
        cost_of=workload_cost,
    ) as twin:
        twin.set_workload("resnet8", 16)  # ~95 ms minibatches, ~35 % GPU-busy: a square wave
        gt = twin.ground_truth(16, 921_600_000)
        sensor = SysfsPowerSensor.discover(tmp_path)
        with PowerSampler(sensor, interval_s=0.005) as sampler:
            time.sleep(0.1)
            start = time.monotonic()
            time.sleep(1.2)
            end = time.monotonic()
        stats = sampler.stats(start, end)
        true_mean, true_peak, true_energy = twin.average_power_w(stats.start_s, stats.end_s)
    assert stats.samples > 100
    # sampling error of a square wave seen at 5 ms, plus 1 % sensor noise
    assert stats.mean_power_w == pytest.approx(true_mean, rel=0.05)
    assert stats.energy_j == pytest.approx(true_energy, rel=0.05)
    assert stats.peak_power_w <= true_peak + 1e-6
    assert stats.peak_power_w == pytest.approx(gt.peak_power_w, rel=0.05)
    # the files are a step function at tick resolution (5 ms, jittery on a loaded machine)
    assert true_mean == pytest.approx(gt.mean_power_w, rel=0.12)


def test_stabilisation_waits_out_a_step(tmp_path: Path) -> None:
    tau = 0.2
    with DeviceTwin(
        "jetson-nano",
        tmp_path,
        tick_s=0.01,
        noise_rel=0.005,
        power_settle_tau_s=tau,
        cost_of=workload_cost,
    ) as twin:
        node = GpuDevfreq.discover(tmp_path)
        node.pin(307_200_000)
        twin.set_workload("resnet18", 128)
        sensor = SysfsPowerSensor.discover(tmp_path)
        with PowerSampler(sensor, interval_s=0.01) as sampler:
            time.sleep(1.5)  # > 7 tau: settled at 307.2 MHz
            before = time.monotonic()
            assert (
                sampler.wait_stable(before - 0.4, window_s=0.3, rel_spread=0.03, timeout_s=1.0)
                is not None
            )
            change = time.monotonic()
            node.pin(921_600_000)
            stable = sampler.wait_stable(change, window_s=0.3, rel_spread=0.03, timeout_s=5.0)
            assert stable is not None
            time.sleep(0.1)
            after = [s.power_w for s in sampler.samples(stable - 0.3, stable)]
    settle = stable - change
    # window (0.3 s) plus the lag: the trailing window's spread only falls under 3 % after ~3 tau
    assert settle >= 0.3 + 2 * tau
    assert settle < 3.0
    target = twin.ground_truth(128, 921_600_000).peak_power_w
    assert statistics.median(after) == pytest.approx(target, rel=0.05)


def test_find_stable_time_on_synthetic_step() -> None:
    pts = [PowerSample(timestamp_s=i * 0.01, power_w=2.0 if i < 100 else 5.0) for i in range(300)]
    # Stable once two whole windows after the step agree: t = 1.0 + 2 × 0.2.
    t = find_stable_time(pts, after_s=0.95, window_s=0.2, rel_spread=0.02)
    assert t is not None and 1.0 + 2 * 0.2 - 0.011 <= t <= 1.0 + 2 * 0.2 + 0.011
    assert find_stable_time(pts[:130], after_s=0.95, window_s=0.2) is None


def test_periodic_minibatch_power_is_stable_once_its_mean_settles() -> None:
    # Busy 6 W for 0.1 s, host gap 3 W for 0.05 s: the spread never drops under 5 %, the mean does.
    pts = [
        PowerSample(timestamp_s=i * 0.01, power_w=6.0 if (i % 15) < 10 else 3.0) for i in range(400)
    ]
    assert relative_spread([p.power_w for p in pts[100:200]]) >= 0.5
    t = find_stable_time(pts, after_s=0.0, window_s=0.6, rel_spread=0.05)
    assert t is not None and t < 1.3
    assert relative_spread([1.0, 1.0, 1.0]) == 0.0
