"""Unit tests of the agent's pure decisions: desired pins from pod lists, ranges, the guard."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgetrain.api.keys import (
    ANNOTATION_CPU_CORES,
    ANNOTATION_CPU_FREQUENCY_HZ,
    ANNOTATION_EMC_FREQUENCY_HZ,
    ANNOTATION_GPU_FREQUENCY_HZ,
    ANNOTATION_POWER_LIMIT_WATTS,
)
from edgetrain.node_agent.logic import (
    EventDeduper,
    ModeRequest,
    ModeTables,
    Range,
    guard_ceiling,
    guard_decision,
    pin_first,
    pod_request,
    progress_values,
    reconcile,
    snap_down,
    target_range,
    training_job,
)

NANO = [76_800_000, 153_600_000, 230_400_000, 307_200_000, 384_000_000, 460_800_000,
        537_600_000, 614_400_000, 691_200_000, 768_000_000, 844_800_000, 921_600_000]


def pod(name: str, freq: object = None, limit: object = None, phase: str = "Running",
        labels: dict[str, str] | None = None, ns: str = "ns") -> dict[str, Any]:
    ann = {}
    if freq is not None:
        ann[ANNOTATION_GPU_FREQUENCY_HZ] = str(freq)
    if limit is not None:
        ann[ANNOTATION_POWER_LIMIT_WATTS] = str(limit)
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}",
                         "annotations": ann, "labels": labels or {}},
            "status": {"phase": phase}}


def test_unannotated_and_finished_pods_ask_nothing() -> None:
    assert pod_request(pod("a"), NANO) is None
    assert pod_request(pod("a", 460_800_000, phase="Succeeded"), NANO) is None
    assert pod_request(pod("a", 460_800_000, phase="Failed"), NANO) is None
    d = reconcile([pod("a"), pod("b", 460_800_000, phase="Succeeded")], NANO)
    assert not d.active and d.freq_hz is None


def test_pending_pod_is_pinned_before_it_starts() -> None:
    d = reconcile([pod("a", 460_800_000, phase="Pending")], NANO)
    assert d.freq_hz == 460_800_000 and d.owner is not None and d.owner.name == "a"


def test_lower_frequency_wins_and_is_a_conflict() -> None:
    d = reconcile([pod("hi", 921_600_000), pod("lo", 307_200_000), pod("same", 307_200_000)],
                  NANO)
    assert d.freq_hz == 307_200_000
    assert d.owner is not None and d.owner.name == "lo"  # tie: first by namespace/name
    assert [(c.winner.name, c.loser.name) for c in d.conflicts] == [("lo", "hi")]


def test_lowest_limit_wins() -> None:
    d = reconcile([pod("a", limit=7), pod("b", 460_800_000, limit="5.5")], NANO)
    assert d.power_limit_w == 5.5 and d.limit_owner is not None and d.limit_owner.name == "b"
    assert d.freq_hz == 460_800_000


def test_off_table_frequency_snaps_down_with_a_problem() -> None:
    r = pod_request(pod("a", 500_000_000), NANO)
    assert r is not None and r.freq_hz == 460_800_000 and r.requested_hz == 500_000_000
    assert r.problems and "not in the GPU table" in r.problems[0]
    below = pod_request(pod("a", 1), NANO)
    assert below is not None and below.freq_hz == NANO[0]


def test_bad_annotations_are_ignored_with_a_problem() -> None:
    r = pod_request(pod("a", "fast", limit="-3"), NANO)
    assert r is not None and r.freq_hz is None and r.power_limit_w is None
    assert len(r.problems) == 2
    assert not reconcile([pod("a", "fast", limit="nan")], NANO).active


def test_training_job_from_labels() -> None:
    assert training_job(pod("p", labels={"job-name": "j1"})) == "j1"
    assert training_job(pod("p", labels={"edgetrain.io/job": "patj", "job-name": "j"})) == "patj"
    assert training_job(pod("p")) == "p"


def test_target_range() -> None:
    saved = Range(76_800_000, 921_600_000)
    assert target_range(reconcile([], NANO), saved, None) is None
    pinned = reconcile([pod("a", 614_400_000)], NANO)
    assert target_range(pinned, saved, None) == Range(614_400_000, 614_400_000)
    assert target_range(pinned, saved, 537_600_000) == Range(537_600_000, 537_600_000)
    assert target_range(pinned, saved, 999_000_000) == Range(614_400_000, 614_400_000)
    limit_only = reconcile([pod("a", limit=5)], NANO)
    assert target_range(limit_only, saved, None) == saved
    assert target_range(limit_only, saved, 460_800_000) == Range(76_800_000, 460_800_000)
    assert guard_ceiling(limit_only, saved) == 921_600_000
    assert guard_ceiling(pinned, saved) == 614_400_000


def samples(t0: float, t1: float, watts: float, dt: float = 0.1) -> list[tuple[float, float]]:
    n = round((t1 - t0) / dt)
    return [(t0 + i * dt, watts) for i in range(n + 1)]


def test_guard_waits_for_a_full_window() -> None:
    s = samples(0, 10, 9.0)
    d = guard_decision(s, now_s=10, since_s=9.5, limit_w=6, window_s=2, table=NANO,
                       current_cap_hz=921_600_000)
    assert d.step_to_hz is None and "not yet full" in d.reason


def test_guard_steps_one_level_down_when_sustained_above() -> None:
    s = samples(0, 10, 9.0)
    d = guard_decision(s, now_s=10, since_s=0, limit_w=6, window_s=2, table=NANO,
                       current_cap_hz=921_600_000)
    assert d.step_to_hz == 844_800_000 and d.mean_power_w == 9.0


def test_guard_ignores_short_spikes_and_power_below_limit() -> None:
    s = samples(0, 9, 5.0) + samples(9.1, 10, 9.0)
    d = guard_decision(s, now_s=10, since_s=0, limit_w=6, window_s=4, table=NANO,
                       current_cap_hz=921_600_000)
    assert d.step_to_hz is None and d.mean_power_w is not None and d.mean_power_w < 6


def test_guard_needs_coverage_and_stops_at_the_floor() -> None:
    sparse = [(0.0, 9.0), (9.9, 9.0), (10.0, 9.0)]
    d = guard_decision(sparse, now_s=10, since_s=0, limit_w=6, window_s=2, table=NANO,
                       current_cap_hz=921_600_000)
    assert d.step_to_hz is None and "cover" in d.reason
    floor = guard_decision(samples(0, 10, 9.0), now_s=10, since_s=0, limit_w=6, window_s=2,
                           table=NANO, current_cap_hz=NANO[0])
    assert floor.step_to_hz is None and "lowest" in floor.reason


@given(cap=st.sampled_from(NANO), watts=st.floats(0.1, 30), limit=st.floats(0.5, 20))
def test_guard_never_raises(cap: int, watts: float, limit: float) -> None:
    d = guard_decision(samples(0, 5, watts), now_s=5, since_s=0, limit_w=limit, window_s=2,
                       table=NANO, current_cap_hz=cap)
    if d.step_to_hz is not None:
        assert d.step_to_hz < cap and d.step_to_hz in NANO
        assert NANO.index(d.step_to_hz) == NANO.index(cap) - 1


@given(freqs=st.lists(st.integers(1, 2_000_000_000), min_size=1, max_size=6))
def test_reconcile_pins_the_minimum_snapped_request(freqs: list[int]) -> None:
    pods = [pod(f"p{i}", f) for i, f in enumerate(freqs)]
    d = reconcile(pods, NANO)
    assert d.freq_hz == min(snap_down(f, NANO) for f in freqs)
    assert all(c.loser.freq_hz != d.freq_hz for c in d.conflicts)


def test_progress_and_dedupe() -> None:
    assert progress_values({"edgetrain.io/training-samples": "1200",
                            "edgetrain.io/training-accuracy": "x"}) == {"samples": 1200.0}
    dd = EventDeduper()
    assert dd.first("u", "R", "m") and not dd.first("u", "R", "m") and dd.first("u", "R", "n")


def test_dedupe_forgets_gone_objects() -> None:
    dd = EventDeduper()
    dd.first("a", "R", "m")
    dd.first("b", "R", "m")
    dd.keep_only({"b"})
    assert dd.first("a", "R", "m") and not dd.first("b", "R", "m")


# --- full power modes (plans from predicted profiles) ---

MODES = ModeTables(cpu_cores=4, cpu_freqs_hz=(102_000_000, 918_000_000, 1_479_000_000),
                   emc_freqs_hz=(204_000_000, 1_600_000_000))


def mode_pod(name: str, freq: object = None, **mode: object) -> dict[str, Any]:
    p = pod(name, freq)
    keys = {"cores": ANNOTATION_CPU_CORES, "cpu": ANNOTATION_CPU_FREQUENCY_HZ,
            "emc": ANNOTATION_EMC_FREQUENCY_HZ}
    p["metadata"]["annotations"].update({keys[k]: str(v) for k, v in mode.items()})
    return p


@pytest.mark.parametrize(
    ("mode", "want", "problem"),
    [
        ({"cores": 2, "cpu": 918_000_000, "emc": 1_600_000_000},
         ModeRequest(2, 918_000_000, 1_600_000_000), None),
        ({"cores": 8, "cpu": 1_000_000_000, "emc": 1_600_000_000},  # snapped down, said so
         ModeRequest(4, 918_000_000, 1_600_000_000), "not on this board's tables"),
        ({"cores": 2, "cpu": 918_000_000}, None, "missing edgetrain.io/emc-frequency-hz"),
        ({"cores": "two", "cpu": 918_000_000, "emc": 1_600_000_000}, None,
         "not a positive integer"),
        ({"cores": 0, "cpu": 918_000_000, "emc": 1_600_000_000}, None, "not a positive integer"),
    ],
)
def test_power_mode_annotations(mode: dict[str, object], want: ModeRequest | None,
                                problem: str | None) -> None:
    req = pod_request(mode_pod("a", 460_800_000, **mode), NANO, MODES)
    assert req is not None and req.freq_hz == 460_800_000  # the GPU pin stands either way
    assert req.mode == want
    assert (problem is None) == (not req.problems)
    if problem is not None:
        assert problem in req.problems[0]


def test_power_mode_on_a_board_without_tables_is_refused_with_a_reason() -> None:
    req = pod_request(mode_pod("a", 460_800_000, cores=2, cpu=918_000_000, emc=204_000_000),
                      NANO, None)
    assert req is not None and req.mode is None and "unknown to the agent" in req.problems[0]


def test_the_pinned_pods_mode_wins_and_a_mode_alone_pins_no_clock() -> None:
    lo = mode_pod("lo", 307_200_000, cores=2, cpu=918_000_000, emc=204_000_000)
    hi = mode_pod("hi", 921_600_000, cores=4, cpu=1_479_000_000, emc=1_600_000_000)
    d = reconcile([hi, lo], NANO, MODES)
    assert d.mode == ModeRequest(2, 918_000_000, 204_000_000)
    assert d.mode_owner is not None and d.mode_owner.name == "lo"
    alone = reconcile([mode_pod("m", cores=1, cpu=102_000_000, emc=204_000_000)], NANO, MODES)
    assert alone.mode == ModeRequest(1, 102_000_000, 204_000_000) and not alone.active


M_LOW, M_HIGH = ModeRequest(1, 102_000_000, 204_000_000), ModeRequest(4, 1_479_000_000,
                                                                     1_600_000_000)


@pytest.mark.parametrize(("current_max", "target", "current_mode", "mode", "first"), [
    # The pin lowers the GPU: it goes first whatever the mode does.
    (921_600_000, Range(460_800_000, 460_800_000), M_LOW, M_HIGH, True),
    (921_600_000, Range(460_800_000, 460_800_000), M_HIGH, M_LOW, True),
    # The pin raises the GPU and the mode only lowers: the mode goes first.
    (307_200_000, Range(921_600_000, 921_600_000), M_HIGH, M_LOW, False),
    (307_200_000, Range(921_600_000, 921_600_000), None, M_LOW, True),  # unknown: raises
    # Both raise: either order stays under the new setting; the pin goes first.
    (307_200_000, Range(921_600_000, 921_600_000), M_LOW, M_HIGH, True),
    # The same mode (raises nothing) with a raising pin: nothing to lower, the mode first.
    (307_200_000, Range(921_600_000, 921_600_000), M_LOW, M_LOW, False),
    # Nothing to order.
    (921_600_000, None, M_LOW, M_HIGH, True),
    (921_600_000, Range(460_800_000, 460_800_000), M_LOW, None, True),
])
def test_the_setting_that_lowers_the_draw_goes_first(
        current_max: int, target: Range | None, current_mode: ModeRequest | None,
        mode: ModeRequest | None, first: bool) -> None:
    assert pin_first(current_max, target, current_mode, mode) is first
