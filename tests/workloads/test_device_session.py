"""SessionMeter on a twin: device time, energy and the power trace on the device's clock."""

from __future__ import annotations

import pytest

from edgetrain.device import DeviceError, GpuDevfreq
from edgetrain.device.sim import DeviceTwin, TwinWorkload
from edgetrain.workloads.device_session import DeviceSession, SessionMeter


def test_trace_is_on_device_time_bounded_and_keeps_energy(nano: DeviceTwin) -> None:
    workload = TwinWorkload(model="resnet8-w025", input_shape=(1, 28, 28), num_classes=10,
                            batch_size=16, busy=True)
    with DeviceSession(nano.root) as session:
        session.set_workload(workload)
        meter = SessionMeter(session, workload, max_trace_points=8)
        for _ in range(37):  # host-side gaps between steps are not device time
            meter.step(16, wall_s=0.05)
        usage = meter.usage()
        trace = meter.power_trace()
    assert 4 <= len(trace) <= 8  # halved whenever it outgrew the bound
    times = [t for t, _ in trace]
    assert times == sorted(times)
    assert times[-1] == pytest.approx(usage.device_time_s)
    # Merging stretches keeps energy: Σ mean W × stretch length = the meter's energy.
    starts = [0.0, *times[:-1]]
    energy_j = sum(p * (t - s) for (t, p), s in zip(trace, starts, strict=True))
    assert energy_j == pytest.approx(usage.energy_j or 0.0, rel=1e-9)
    # Device time is the twin's per-minibatch time, whatever the host's wall time per step was.
    assert usage.device_time_s / 37 != pytest.approx(0.05, rel=0.05)


def test_clocks_asked_of_the_agent_are_only_read_back(nano: DeviceTwin) -> None:
    """--clock-by-agent: each pin is a request (the stand-in agent below writes devfreq, as
    the node agent does), the session never writes devfreq nor restores a range itself, and
    it releases the clock on exit."""
    devfreq = GpuDevfreq.discover(nano.root)
    table = devfreq.available_frequencies_hz()
    asked: list[int | None] = []

    def agent(freq_hz: int | None) -> None:
        asked.append(freq_hz)
        if freq_hz is not None:
            devfreq.pin(freq_hz)

    with DeviceSession(nano.root, clock_request=agent) as session:
        for f in (table[2], table[0]):
            session.pin(f)
            assert devfreq.cur_freq_hz() == f
    assert asked == [table[2], table[0], None]
    # The range stays as the "agent" left it: releasing it is the agent's job.
    assert devfreq.current_range().max_freq_hz == table[0]


def test_a_clock_the_agent_never_sets_says_what_to_check(nano: DeviceTwin) -> None:
    devfreq = GpuDevfreq.discover(nano.root)
    other = next(f for f in devfreq.available_frequencies_hz() if f != devfreq.cur_freq_hz())
    with (DeviceSession(nano.root, clock_request=lambda _f: None, clock_timeout_s=0.3)
          as session, pytest.raises(DeviceError, match="is edgetrain's node agent running")):
        session.pin(other)


def test_training_waits_for_the_agents_pin_and_mode(nano: DeviceTwin) -> None:
    """--await-pin: the session reads the device until the (stand-in) agent has written the
    pin and the mode, whatever order it writes them in, and only then returns."""
    import threading
    import time

    from edgetrain.device.power_mode import PowerModeWriter

    devfreq = GpuDevfreq.discover(nano.root)
    table = sorted(devfreq.available_frequencies_hz())
    pin = table[5]
    writer = PowerModeWriter(nano.root, "jetson-nano")
    mode = (2, 921_600_000, 1_600_000_000)
    written: list[str] = []

    def agent() -> None:  # the pin, a pause, then the mode: a pod must not start in between
        time.sleep(0.3)
        devfreq.pin(pin)
        written.append("pin")
        time.sleep(0.5)
        writer.apply(*mode)
        written.append("mode")

    thread = threading.Thread(target=agent)
    with DeviceSession(nano.root, clock_timeout_s=5.0) as session:
        thread.start()
        assert session.await_agent_setting(pin, mode) is None
        assert written == ["pin", "mode"]
        thread.join()
        # A later state is accepted at once: the guard stepped below the pin.
        devfreq.pin(table[3])
        assert session.await_agent_setting(pin, mode, mode_grace_s=0.0) is None
    writer.restore()


def test_a_mode_the_agent_refused_is_a_warning_and_a_missing_pin_an_error(
        nano: DeviceTwin) -> None:
    devfreq = GpuDevfreq.discover(nano.root)
    table = sorted(devfreq.available_frequencies_hz())
    with DeviceSession(nano.root, clock_timeout_s=0.3) as session:
        with pytest.raises(DeviceError, match="did not pin the GPU"):
            session.await_agent_setting(table[4])  # the full range is not a pin
        devfreq.pin(table[4])
        warning = session.await_agent_setting(table[4], (1, 102_000_000, 204_000_000),
                                              mode_grace_s=0.2)
    assert warning is not None and "PowerModeFailed" in warning
