"""Probing the gradient noise scale in training leaves the run exactly as it was."""

from __future__ import annotations

import torch

from edgetrain.api.training import OptimizerSpec
from edgetrain.workloads.noise_scale import micro_batches, probe, probe_interval_samples
from edgetrain.workloads.training import load_task, make_model, make_optimizer, train_to_target


def _run(measure: bool) -> tuple[list[tuple[int, float]], list[tuple[int, float, float]]]:
    task = load_task("digits")
    torch.manual_seed(0)
    model = make_model("resnet8-w025", task)
    optimizer = make_optimizer(OptimizerSpec(learning_rate=4e-3, reference_batch_size=64),
                               model, 16)  # fmt: skip
    state = train_to_target(model, optimizer, task, batch_size=16, target_accuracy=0.99,
                            sample_budget=1536, eval_interval_samples=256, seed=0,
                            eval_samples=200, measure_noise=measure)  # fmt: skip
    return state.curve, state.noise


def test_the_trajectory_is_unchanged_and_the_scale_is_measured() -> None:
    plain, none = _run(False)
    probed, noise = _run(True)
    assert none == [] and probed == plain  # bit for bit: buffers and RNG restored
    assert len(noise) >= 4 and all(s < 1536 for s, _g, _t in noise)


def test_probe_needs_two_micro_batches_and_keeps_buffers() -> None:
    assert micro_batches(1) == 0 and micro_batches(2) == 2 and micro_batches(6) == 3
    assert micro_batches(128) == 4
    assert probe_interval_samples(128, 1024) == 2048 and probe_interval_samples(4, 1024) == 1024
    task = load_task("digits")
    torch.manual_seed(0)
    model = make_model("resnet8-w025", task).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = task.batch(0, 16, 0)
    got = probe(model, x, y, 0)
    assert got is not None and got.trace > 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert probe(model, x[:1], y[:1], 0) is None
