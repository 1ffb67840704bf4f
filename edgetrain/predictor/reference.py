"""Reference models: trained once per board on a full simulated profile, shipped as package data.

A reference is one `.npz` per board under `edgetrain/predictor/references/`: float16 weights of
the three MLPs (about 85 KB each) and a JSON header with the scalers, the training recipe and
the twin fingerprint it was trained against. Loading checks the fingerprint, so a reference
goes stale (and says so) when the twin's physics or cost model changes.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from edgetrain.api.errors import BadInputError
from edgetrain.api.io import write_text_atomic
from edgetrain.api.workload import CostFunction, WorkloadCost
from edgetrain.predictor.mlp import TargetModel, TrainConfig, fit_target, mape
from edgetrain.predictor.space import ModeSpace, Target, random_sample
from edgetrain.predictor.twin_data import (
    DEFAULT_NOISE_REL,
    PREDICTOR_FORMAT_VERSION,
    Workload,
    board_space,
    twin_fingerprint,
    twin_table,
    with_noise,
)

REFERENCES_ENV = "EDGETRAIN_PREDICTOR_REFS"
#: Batch sizes of reference profiles: wide, so targets' batch sizes are interpolated.
REFERENCE_BATCH_SIZES: tuple[int, ...] = (4, 8, 16, 32, 64, 128, 256)
#: Reference training points per board: a uniform sample of (batch size, mode). The paper sees
#: no accuracy difference between 500 and 4,368 reference modes.
REFERENCE_POINTS = 6_000
REFERENCE_CONFIG = TrainConfig(batch_size=64)
HOLDOUT_POINTS = 2_000


class StaleReferenceError(BadInputError):
    """The reference was trained against a different twin model (or file format)."""


class ReferenceNotFoundError(BadInputError):
    """No reference model for this board."""


class TargetScaler(BaseModel):
    """Input and log-target scalers of one MLP."""

    model_config = ConfigDict(frozen=True)

    x_mean: list[float]
    x_std: list[float]
    y_mean: float
    y_std: float


class ReferenceMeta(BaseModel):
    """Header of a reference file: what it was trained on, how, and against which twin."""

    model_config = ConfigDict(extra="forbid")

    format_version: int = PREDICTOR_FORMAT_VERSION
    board: str
    workload: Workload
    twin_fingerprint: str
    batch_sizes: list[int]
    points: int
    noise_rel: float
    seed: int
    config: TrainConfig
    scalers: dict[str, TargetScaler]
    holdout_mape_pct: dict[str, float]  # on noise-free points the training never saw
    best_epochs: dict[str, int]
    weights_dtype: str = "float16"
    simulated: bool = True


@dataclass(frozen=True)
class Reference:
    """A loaded reference: its header and one MLP per target."""

    meta: ReferenceMeta
    models: dict[Target, TargetModel]

    @property
    def name(self) -> str:
        """`board/model@fingerprint`, as reports cite it."""
        return f"{self.meta.board}/{self.meta.workload.model}@{self.meta.twin_fingerprint}"


def package_dir() -> Path:
    """The shipped references folder."""
    return Path(__file__).with_name("references")


def reference_path(board: str, directory: Path | None = None) -> Path:
    """Where the reference of a board is looked up: `directory`, $EDGETRAIN_PREDICTOR_REFS,
    then the package."""
    for base in (directory, os.environ.get(REFERENCES_ENV)):
        if base:
            return Path(base) / f"{board}.npz"
    return package_dir() / f"{board}.npz"


def save_reference(reference: Reference, path: Path) -> None:
    """Write the `.npz` (float16 weights + JSON header) atomically."""
    arrays: dict[str, np.ndarray] = {
        "meta": np.frombuffer(reference.meta.model_dump_json().encode(), dtype=np.uint8)
    }
    for target, model in reference.models.items():
        for i, w in enumerate(model.weights):
            arrays[f"{target.value}__{i}"] = w.astype(np.float16)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(buffer.getvalue())
    os.replace(tmp, path)


def read_reference(path: Path) -> Reference:
    """Read a reference file (no staleness check)."""
    with np.load(path, allow_pickle=False) as data:
        meta = ReferenceMeta.model_validate_json(bytes(data["meta"]).decode())
        models: dict[Target, TargetModel] = {}
        for target in Target:
            scaler = meta.scalers[target.value]
            n = 2 * (len(meta.config.hidden) + 1)
            weights = tuple(data[f"{target.value}__{i}"].astype(np.float64) for i in range(n))
            models[target] = TargetModel(
                weights,
                np.asarray(scaler.x_mean),
                np.asarray(scaler.x_std),
                scaler.y_mean,
                scaler.y_std,
            )
    return Reference(meta, models)


def load_reference(
    board: str, directory: Path | None = None, *, cost_of: CostFunction | None
) -> Reference:
    """The reference for `board`; raises if missing or, given `cost_of` (the twin check needs
    the reference workload's cost), if trained against another twin version."""
    path = reference_path(board, directory)
    if not path.is_file():
        raise ReferenceNotFoundError(
            f"no predictor reference for {board} at {path}; run `edgetrain train-reference"
            f" --board {board}`"
        )
    reference = read_reference(path)
    if cost_of is not None:
        meta = reference.meta
        wl = meta.workload
        current = twin_fingerprint(board, cost_of(wl.model, wl.input_shape, wl.num_classes))
        if meta.format_version != PREDICTOR_FORMAT_VERSION or meta.twin_fingerprint != current:
            raise StaleReferenceError(
                f"{path} was trained against twin {meta.twin_fingerprint} (format"
                f" {meta.format_version}); the twin is now {current} (format"
                f" {PREDICTOR_FORMAT_VERSION}); run `edgetrain train-reference --board {board}`"
            )
    return reference


def train_reference(
    board: str,
    cost: WorkloadCost,
    *,
    batch_sizes: tuple[int, ...] = REFERENCE_BATCH_SIZES,
    points: int = REFERENCE_POINTS,
    config: TrainConfig = REFERENCE_CONFIG,
    noise_rel: float = DEFAULT_NOISE_REL,
    seed: int = 0,
    on_target: Callable[[Target, float], None] | None = None,
) -> Reference:
    """Train the three reference MLPs on a uniform sample of the board's simulated full profile.

    Measurements are the twin's ground truth with seeded noise; the holdout MAPE is measured on
    other, noise-free points. Weights are rounded to float16, as they will be stored.
    """
    space: ModeSpace = board_space(board, batch_sizes)
    n = min(points, space.size)
    both = random_sample(space, min(space.size, n + HOLDOUT_POINTS), seed)
    order = np.random.default_rng(seed).permutation(len(both))
    train_idx, hold_idx = both[order[:n]], both[order[n:]]
    grid, hold_grid = space.grid(train_idx), space.grid(hold_idx)
    measured = with_noise(twin_table(board, cost, grid), noise_rel, seed)
    truth = twin_table(board, cost, hold_grid) if len(hold_grid) else None
    models: dict[Target, TargetModel] = {}
    scalers: dict[str, TargetScaler] = {}
    holdout: dict[str, float] = {}
    epochs: dict[str, int] = {}
    for target in Target:
        model, report = fit_target(grid, measured[target], config.model_copy(update={"seed": seed}))
        model = TargetModel(
            tuple(w.astype(np.float16).astype(np.float64) for w in model.weights),
            model.x_mean,
            model.x_std,
            model.y_mean,
            model.y_std,
        )
        models[target] = model
        scalers[target.value] = TargetScaler(
            x_mean=model.x_mean.tolist(),
            x_std=model.x_std.tolist(),
            y_mean=model.y_mean,
            y_std=model.y_std,
        )
        epochs[target.value] = report.best_epoch
        if truth is not None:
            holdout[target.value] = mape(model.predict(hold_grid), truth[target])
        if on_target is not None:
            on_target(target, holdout.get(target.value, float("nan")))
    meta = ReferenceMeta(
        board=board,
        workload=Workload.of(cost),
        twin_fingerprint=twin_fingerprint(board, cost),
        batch_sizes=list(batch_sizes),
        points=n,
        noise_rel=noise_rel,
        seed=seed,
        config=config,
        scalers=scalers,
        holdout_mape_pct=holdout,
        best_epochs=epochs,
    )
    return Reference(meta, models)


def write_reference_card(reference: Reference, path: Path) -> None:
    """A small JSON next to the `.npz` with its header, for humans and diffs."""
    write_text_atomic(path, json.dumps(reference.meta.model_dump(mode="json"), indent=2) + "\n")
