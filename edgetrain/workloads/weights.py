"""Pretrained starting weights: made by `edgetrain pretrain`, cached by the hash of their recipe."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Annotated

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from edgetrain.api.io import file_sha256, write_text_atomic
from edgetrain.api.training import OptimizerSpec, Precision
from edgetrain.workloads.accel import resolve
from edgetrain.workloads.progress import Reporter
from edgetrain.workloads.training import (
    configure_threads,
    load_task,
    make_model,
    make_optimizer,
    train_to_target,
)


class PretrainSpec(BaseModel):
    """The recipe of a pretrained model; its hash names the cached weights."""

    model_config = ConfigDict(frozen=True)

    model: str
    dataset: str
    samples: Annotated[int, Field(gt=0)] = 20_000
    batch_size: Annotated[int, Field(gt=0)] = 64
    optimizer: OptimizerSpec = OptimizerSpec(learning_rate=2e-3, reference_batch_size=64)
    seed: int = 0
    dataset_limit: int | None = None

    def key(self) -> str:
        """A stable short hash of the recipe."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


class WeightsInfo(BaseModel):
    """Sidecar metadata stored beside a weights file."""

    spec: PretrainSpec
    sha256: str
    test_accuracy: float


def cache_dir() -> Path:
    """Where weights are cached: $EDGETRAIN_CACHE_DIR/weights or ~/.cache/edgetrain/weights."""
    base = os.environ.get("EDGETRAIN_CACHE_DIR")
    return (Path(base) if base else Path.home() / ".cache" / "edgetrain") / "weights"


def weights_path(spec: PretrainSpec) -> Path:
    """The cache path for a recipe."""
    return cache_dir() / f"{spec.model}-{spec.dataset}-{spec.key()}.pt"


def save_state_atomic(state: object, path: Path) -> None:
    """torch.save through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def pretrain(
    spec: PretrainSpec,
    reporter: Reporter | None = None,
    *,
    device: str = "auto",
    precision: Precision = Precision.fp32,
) -> Path:
    """Train the recipe once and cache it; later calls return the cached file.

    The device and precision are not part of the recipe: cached weights serve every device.
    """
    path = weights_path(spec)
    accel = resolve(device, precision)  # a bad choice fails even when the weights are cached
    if path.is_file():
        return path
    configure_threads()
    task = load_task(spec.dataset, spec.dataset_limit).to(accel.device)
    torch.manual_seed(spec.seed)
    model = make_model(spec.model, task).to(accel.device)
    optimizer = make_optimizer(spec.optimizer, model, spec.batch_size)
    if reporter:
        reporter.start(f"pretrain {spec.model} on {spec.dataset}", spec.samples)
    state = train_to_target(
        model,
        optimizer,
        task,
        batch_size=spec.batch_size,
        target_accuracy=2.0,  # never reached: pretraining runs its whole budget
        sample_budget=spec.samples,
        eval_interval_samples=max(spec.samples // 5, spec.batch_size),
        seed=spec.seed,
        eval_samples=2000,
        accel=accel,
        scaler=accel.grad_scaler(),
        on_eval=(
            (lambda s: reporter.advance(s.samples, f"acc {s.accuracy:.3f}", accuracy=s.accuracy))
            if reporter
            else None
        ),
    )
    # Saved from the CPU so the file loads anywhere without a map_location.
    weights = {k: v.cpu() for k, v in model.state_dict().items()}
    try:
        save_state_atomic(weights, path)
    except OSError:
        # A cache this process may not write (a worker pod's read-only root, another UID's
        # home): the weights serve this run from its temporary directory.
        path = Path(tempfile.gettempdir()) / "edgetrain-weights" / path.name
        save_state_atomic(weights, path)
    info = WeightsInfo(spec=spec, sha256=file_sha256(path), test_accuracy=state.accuracy)
    write_text_atomic(path.with_suffix(".json"), info.model_dump_json(indent=2))
    return path


def load_pretrained(model: nn.Module, path: Path) -> list[str]:
    """Load weights whose shapes match; returns the keys left as initialised (e.g. a new head)."""
    if not path.is_file():
        raise FileNotFoundError(
            f"weights file {path} does not exist; create it with `edgetrain pretrain`"
        )
    saved = torch.load(path, map_location="cpu", weights_only=True)
    own = model.state_dict()
    usable = {k: v for k, v in saved.items() if k in own and own[k].shape == v.shape}
    model.load_state_dict(usable, strict=False)
    return sorted(set(own) - set(usable))


def describe(path: Path) -> dict[str, object]:
    """The sidecar metadata of a cached weights file, if any."""
    side = path.with_suffix(".json")
    return dict(json.loads(side.read_text())) if side.is_file() else {}
