"""Invariants of the cpu scale: the paper's shapes, batch sizes, boards and seeds."""

from __future__ import annotations

from edgetrain.bench.paper.config import Scale, board_limits_w, config_for, cpu_config
from edgetrain.device.sim import BOARDS
from edgetrain.workloads.models import MODEL_REGISTRY, is_text_model

PAPER_TWINS = {"resnet18": (3, 32, 32), "mobilenetv2": (3, 32, 32), "charformer": (64,)}


def test_cpu_scale_has_the_papers_shapes_boards_and_seeds() -> None:
    config = config_for(Scale.cpu)
    assert config.scale == "cpu" and len(config.seeds) >= 5
    assert [b.board for b in config.boards] == ["jetson-nano", "jetson-tx2-nx", "jetson-agx-orin"]
    assert all(b.board in BOARDS for b in config.boards)
    for board in config.boards:
        assert board.power_limits_w == board_limits_w(board.board, [4, 8, 16, 32, 64, 128])
        assert board.power_limits_w[-1] is None and len(board.power_limits_w) == 3
    assert config.boards[0].power_limits_w == [4.5, 7.0, None]
    twins = {w.twin_model: w for w in config.workloads}
    assert set(twins) == set(PAPER_TWINS)
    for name, w in twins.items():
        assert w.twin_input_shape == PAPER_TWINS[name]
        assert w.model in MODEL_REGISTRY and w.model != name  # N(b) from a CPU-sized model
        assert is_text_model(w.model) == is_text_model(name)
        assert w.batch_sizes[0] == 4 and max(w.batch_sizes) in (64, 128)
        assert w.batch_sizes == sorted(w.batch_sizes)
        assert {d.name for d in w.datasets} >= {w.proxy, *w.targets}
        # Every batch size must be able to spend ≥ 10⁴ samples before the target is reached.
        assert w.sample_budget >= 10_000 and w.eval_interval_samples <= 1024
    assert max(twins["resnet18"].batch_sizes) == 128 == max(twins["charformer"].batch_sizes)
    assert config.predicted.points == 20


def test_seeds_override_and_default() -> None:
    assert cpu_config([7]).seeds == [7]
    assert cpu_config().seeds == [0, 1, 2, 3, 4]
