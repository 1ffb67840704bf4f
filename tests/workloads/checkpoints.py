"""Checkpoint helpers shared by the CPU and CUDA tests (imported once, so registered once)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from edgetrain.api.workload_spec import TrainSpec
from edgetrain.workloads.progress import Reporter

_TAG_AS: list[str] = []


def _tagger(storage: Any) -> str | None:
    return _TAG_AS[-1] if _TAG_AS and storage.device.type == "cpu" else None


torch.serialization.register_package(0, _tagger, lambda _storage, _location: None)


@contextlib.contextmanager
def tagged_as(location: str) -> Iterator[None]:
    """torch.save inside tags every CPU tensor with `location`, as a save on that device does."""
    _TAG_AS.append(location)
    try:
        yield
    finally:
        _TAG_AS.pop()


class Killed(Exception):
    pass


class KillAfter(Reporter):
    """Stops training after the n-th checkpoint, as a SIGKILL between evaluations would."""

    def __init__(self, evaluations: int) -> None:
        super().__init__(json_lines=False)
        self._progress = None  # no bars in tests
        self.left = evaluations

    def advance(self, completed: float, status: str = "", **fields: Any) -> None:
        self.left -= 1
        if self.left == 0:
            raise Killed


def spec_on(device: str) -> TrainSpec:
    return TrainSpec(
        model="resnet8-w025",
        dataset="digits",
        batch_size=32,
        target_accuracy=0.99,
        sample_budget=384,
        eval_interval_samples=128,
        eval_samples=64,
        device=device,
    )
