"""The PowerTrain-style predictor: grids, sampling, training, transfer, margins, references.

Twin figures are simulated; training here is small and seeded so the file runs in seconds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgetrain.api.profile import format_profile_csv, parse_profile_csv
from edgetrain.device.sim import BOARDS, count_power_modes
from edgetrain.planner import Lut
from edgetrain.predictor.mlp import (
    Predictor,
    TargetModel,
    TrainConfig,
    fit_predictor,
    fit_target,
    mape,
)
from edgetrain.predictor.reference import (
    Reference,
    StaleReferenceError,
    load_reference,
    read_reference,
    reference_path,
    save_reference,
    train_reference,
)
from edgetrain.predictor.space import (
    ModeSpace,
    Target,
    cover_sample,
    grid_rows,
    predicted_lut,
    profile_points,
    random_sample,
)
from edgetrain.predictor.twin_data import (
    board_space,
    stock_modes,
    twin_fingerprint,
    twin_table,
    with_noise,
)
from edgetrain.workloads import workload_cost
from edgetrain.workloads.profile_predicted import reference_workload_cost

SMALL = ModeSpace(
    batch_sizes=(8, 32),
    gpu_freqs_hz=(300, 600, 900),
    cpu_freqs_hz=(1000, 2000),
    cpu_cores=(1, 2, 4),
    emc_freqs_hz=(500, 1500),
)


def test_grid_is_in_lut_order_and_flat_indices_agree() -> None:
    grid = SMALL.grid()
    assert grid.shape == (SMALL.size, 5) and SMALL.size == 2 * 3 * 2 * 3 * 2
    assert SMALL.mode_count == SMALL.size // 2
    # Within a batch size the modes are sorted as the LUT sorts its columns.
    modes = [tuple(r) for r in grid[: SMALL.mode_count, 1:].tolist()]
    assert modes == sorted(modes)
    flat = np.array([0, 5, 17, SMALL.size - 1])
    assert np.array_equal(SMALL.grid(flat), grid[flat])


def test_cover_sample_is_distinct_seeded_and_covers_every_level() -> None:
    space = board_space("jetson-orin-nano", (8, 16, 32, 64, 128))
    a = cover_sample(space, 50, seed=3)
    assert len(set(a.tolist())) == 50
    assert np.array_equal(a, cover_sample(space, 50, seed=3))
    assert not np.array_equal(a, cover_sample(space, 50, seed=4))
    rows = space.grid(a)
    for d, axis in enumerate(space.axes()):
        if len(axis) <= 50:  # every level is a stratum of its own or shares one
            assert set(rows[:, d].tolist()) == set(axis.tolist()), d
    r = random_sample(space, 50, seed=3)
    assert len(set(r.tolist())) == 50


def test_board_space_matches_the_twin_mode_count() -> None:
    for board in BOARDS:
        assert board_space(board, (1,)).mode_count == count_power_modes(board)


def test_fit_target_learns_a_smooth_function() -> None:
    grid = SMALL.grid()
    y = 0.01 * (1 + 4 / grid[:, 0]) * 1e3 / grid[:, 1] + 1e-6 * grid[:, 4]
    model, report = fit_target(
        grid, y, TrainConfig(epochs=80, batch_size=24, learning_rate=3e-3, seed=1)
    )
    assert report.val_points == round(0.1 * len(y))
    assert mape(model.predict(grid), y) < 10.0


def _small_reference(board: str) -> Reference:
    return train_reference(
        board,
        reference_workload_cost("resnet18"),
        batch_sizes=(8, 16, 32, 64, 128),
        points=1500,
        config=TrainConfig(batch_size=64, epochs=10),
        seed=0,
    )


@pytest.fixture(scope="module")
def orin_nano_reference() -> Reference:
    return _small_reference("jetson-orin-nano")


def test_transfer_beats_scratch_on_the_same_points(orin_nano_reference: Reference) -> None:
    board = "jetson-orin-nano"
    space = board_space(board, (8, 16, 32, 64, 128))
    idx = cover_sample(space, 30, seed=0)
    # Judged on 1,500 other points (noise-free), measured on the 30 (1 % noise).
    grid = space.grid(np.setdiff1d(random_sample(space, 1530, seed=1), idx)[:1500])
    truth = twin_table(board, reference_workload_cost("mobilenetv2"), grid)
    sampled = twin_table(board, reference_workload_cost("mobilenetv2"), space.grid(idx))
    measured = with_noise(sampled, 0.01, seed=0)
    config = TrainConfig(epochs=40, seed=0)
    pt, pt_report = fit_predictor(
        space.grid(idx), measured, config, reference=orin_nano_reference.models, folds=2
    )
    nn, _ = fit_predictor(space.grid(idx), measured, config, reference=None, folds=0)
    pt_pred, nn_pred = pt.predict(grid, with_margin=False), nn.predict(grid, with_margin=False)
    pt_time, nn_time = (
        mape(pt_pred[Target.time], truth[Target.time]),
        mape(nn_pred[Target.time], truth[Target.time]),
    )
    assert pt_time < nn_time
    assert mape(pt_pred[Target.peak_power], truth[Target.peak_power]) < 5.0
    assert pt_time < 15.0
    # The margin comes from out-of-fold residuals and is applied to power only.
    margin = pt.power_margin[Target.peak_power]
    assert 0.0 <= margin < 0.2 and pt_report.power_margin["peak_power_w"] == margin
    with_margin = pt.predict(grid)
    assert np.allclose(with_margin[Target.time], pt_pred[Target.time])
    assert np.allclose(with_margin[Target.peak_power], pt_pred[Target.peak_power] * (1 + margin))
    assert np.all(with_margin[Target.mean_power] <= with_margin[Target.peak_power])


def test_predicted_table_becomes_a_full_mode_profile() -> None:
    grid = SMALL.grid()
    ones = np.ones(len(grid))
    preds = {Target.time: ones * 0.01, Target.peak_power: ones * 5.0, Target.mean_power: ones * 6}
    measured_point = profile_points(grid[:1], {t: v[:1] * 2 for t, v in preds.items()})[0]
    points = profile_points(grid, preds, {0: measured_point})
    assert points[0] == measured_point and len(points) == SMALL.size
    assert all(p.mean_power_w <= p.peak_power_w for p in points)  # mean clamped to peak
    parsed = parse_profile_csv(format_profile_csv(points))
    lut = Lut.from_points(parsed)
    assert lut.has_full_modes and lut.measured.all()
    direct = predicted_lut(SMALL, preds)
    assert np.array_equal(direct.modes, lut.modes)
    assert np.array_equal(grid_rows(SMALL, parsed[:5]), np.arange(5))


def test_reference_round_trip_and_staleness(
    orin_nano_reference: Reference, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = reference_path("jetson-orin-nano", tmp_path)
    save_reference(orin_nano_reference, path)
    assert path.stat().st_size < 400_000
    loaded = load_reference("jetson-orin-nano", tmp_path, cost_of=workload_cost)
    grid = board_space("jetson-orin-nano", (16,)).grid()
    for t in Target:
        assert np.array_equal(
            loaded.models[t].predict(grid), orin_nano_reference.models[t].predict(grid)
        )
    stale = Reference(
        orin_nano_reference.meta.model_copy(update={"twin_fingerprint": "0" * 16}),
        orin_nano_reference.models,
    )
    save_reference(stale, path)
    with pytest.raises(StaleReferenceError, match="train-reference"):
        load_reference("jetson-orin-nano", tmp_path, cost_of=workload_cost)
    assert read_reference(path).meta.twin_fingerprint == "0" * 16
    monkeypatch.setenv("EDGETRAIN_PREDICTOR_REFS", str(tmp_path))
    assert reference_path("jetson-orin-nano") == path


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_shipped_reference_matches_the_twin(board: str) -> None:
    # raises if trained against another twin version
    ref = load_reference(board, cost_of=workload_cost)
    meta = ref.meta
    assert meta.twin_fingerprint == twin_fingerprint(board, workload_cost(meta.workload.model))
    assert meta.simulated and meta.config.hidden == (256, 128, 64)
    assert reference_path(board).stat().st_size < 400_000
    assert meta.holdout_mape_pct["time_per_sample_s"] < 6.0
    assert meta.holdout_mape_pct["peak_power_w"] < 3.0


def test_stock_modes_are_on_the_twin_tables() -> None:
    for board, spec in BOARDS.items():
        modes = stock_modes(board)
        assert modes
        for m in modes:
            assert m.gpu_freq_hz in spec.gpu_freqs_hz and m.cpu_freq_hz in spec.cpu_freqs_hz
            assert m.emc_freq_hz in spec.emc_freqs_hz and 1 <= m.cpu_cores <= spec.cpu_cores
    orin = {m.name: m for m in stock_modes("jetson-agx-orin")}
    assert orin["MODE_15W"].cpu_cores == 4 and orin["MAXN"].cpu_cores == 12


def test_predictor_without_margin_is_the_raw_models() -> None:
    w = (np.ones((1, 5)), np.zeros(1))
    model = TargetModel(w, np.zeros(5), np.ones(5), 0.0, 1.0)
    p = Predictor(
        {t: (model, model) for t in Target}, {Target.peak_power: 0.1, Target.mean_power: 0}
    )
    out = p.predict(SMALL.grid()[:3])
    raw = p.predict(SMALL.grid()[:3], with_margin=False)
    assert np.allclose(out[Target.peak_power], raw[Target.peak_power] * 1.1)
    assert np.allclose(out[Target.mean_power], raw[Target.mean_power])
