"""PowerTrain-style MLPs of time and power over (batch size, full power mode).

An MLP per target (time per sample, peak power, mean power) maps the features batch size, GPU
clock, CPU clock, online CPU cores and memory clock to the target. A reference MLP is trained
once on a full profile; a new workload or device is handled by replacing its last layer and
fine-tuning on k profiled points (transfer). Prediction itself is numpy; training uses PyTorch,
imported inside the training functions so `import edgetrain.predictor` stays light.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from edgetrain.api.enums import StrEnum
from edgetrain.predictor.space import POWER_TARGETS, FloatArray, IntArray, Target, features

if TYPE_CHECKING:
    import torch


class Loss(StrEnum):
    """Training loss: MSE on the standardised log target (default) or MAPE in target units."""

    mse = "mse"
    mape = "mape"


class TransferMode(StrEnum):
    """Which layers fine-tuning updates after the last layer is replaced."""

    all = "all"
    head = "head"


class TrainConfig(BaseModel):
    """MLP architecture and training hyperparameters (PowerTrain Table 4 by default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hidden: tuple[int, ...] = (256, 128, 64)
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.1  # after the first two layers
    learning_rate: Annotated[float, Field(gt=0.0)] = 1e-3
    epochs: Annotated[int, Field(ge=1)] = 100
    batch_size: Annotated[int, Field(ge=1)] = 16
    val_fraction: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.1
    loss: Loss = Loss.mse
    seed: int = 0


# ---------------------------------------------------------------- models


@dataclass(frozen=True)
class TargetModel:
    """One trained MLP with its input scaler and log-target scaler; predicts in numpy."""

    weights: tuple[FloatArray, ...]  # W1, b1, W2, b2, …; W has shape (out, in)
    x_mean: FloatArray
    x_std: FloatArray
    y_mean: float
    y_std: float

    def predict(self, grid: IntArray) -> FloatArray:
        """Predicted target per grid row (seconds or watts)."""
        # float32, as trained: half the time of float64 on a 90,000-row grid.
        h = ((features(grid) - self.x_mean) / self.x_std).astype(np.float32)
        n_layers = len(self.weights) // 2
        for i in range(n_layers):
            w, b = self.weights[2 * i], self.weights[2 * i + 1]
            h = h @ w.T.astype(np.float32) + b.astype(np.float32)
            if i < n_layers - 1:
                np.maximum(h, 0.0, out=h)
        return np.exp(h[:, 0].astype(np.float64) * self.y_std + self.y_mean)

    @property
    def hidden(self) -> tuple[int, ...]:
        """Hidden layer widths."""
        return tuple(int(w.shape[0]) for w in self.weights[0:-2:2])


class FitReport(BaseModel):
    """How one training run went (losses in the configured loss's units)."""

    model_config = ConfigDict(frozen=True)

    train_points: int
    val_points: int
    best_epoch: int
    best_loss: float


def _standardise(values: FloatArray) -> tuple[FloatArray, FloatArray]:
    mean = values.mean(axis=0)
    std = values.std(axis=0)
    # A constant column (one EMC level in a small sample) must not divide by zero.
    return mean, np.where(std > 1e-12, std, 1.0)


def _build_net(n_in: int, config: TrainConfig) -> torch.nn.Sequential:
    from torch import nn

    layers: list[nn.Module] = []
    prev = n_in
    for i, width in enumerate(config.hidden):
        layers += [nn.Linear(prev, width), nn.ReLU()]
        if i < 2 and config.dropout > 0:  # the paper's dropout after the first two layers
            layers.append(nn.Dropout(config.dropout))
        prev = width
    layers.append(nn.Linear(prev, 1))
    return nn.Sequential(*layers)


def _linears(net: torch.nn.Sequential) -> list[torch.nn.Linear]:
    from torch import nn

    return [m for m in net if isinstance(m, nn.Linear)]


def fit_target(
    grid: IntArray,
    y: FloatArray,
    config: TrainConfig,
    *,
    reference: TargetModel | None = None,
    mode: TransferMode = TransferMode.all,
) -> tuple[TargetModel, FitReport]:
    """Train one MLP on (grid, y); with `reference`, transfer from it.

    Transfer keeps the reference's input scaler and hidden layers, replaces the last layer with
    a freshly initialised one and fine-tunes (every layer, or only the new one for `head`).
    Targets are fitted as standardised log values: time spans two orders of magnitude across
    modes, and MSE in log space is a relative error. The best-validation epoch is kept.
    """
    import torch

    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1 or len(y) != len(grid) or len(y) < 2:
        raise ValueError("need at least two points with one target value each")
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("targets must be finite and positive")
    threads = torch.get_num_threads()
    # One thread: for a 40k-parameter MLP, a second thread costs more in sync than it saves.
    torch.set_num_threads(1)
    try:
        return _fit(grid, y, config, reference, mode)
    finally:
        torch.set_num_threads(threads)


def _fit(
    grid: IntArray,
    y: FloatArray,
    config: TrainConfig,
    reference: TargetModel | None,
    mode: TransferMode,
) -> tuple[TargetModel, FitReport]:
    import torch

    torch.manual_seed(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    x_raw = features(grid)
    if reference is None:
        x_mean, x_std = _standardise(x_raw)
    else:
        x_mean, x_std = reference.x_mean, reference.x_std
    log_y = np.log(y)
    y_mean = float(log_y.mean())
    y_std = float(log_y.std()) if log_y.std() > 1e-9 else 1.0

    net = _build_net(x_raw.shape[1], config)
    linears = _linears(net)
    if reference is not None:
        if reference.hidden != config.hidden:
            raise ValueError(f"reference has layers {reference.hidden}, config {config.hidden}")
        with torch.no_grad():
            for i, layer in enumerate(linears[:-1]):  # the last layer stays freshly initialised
                layer.weight.copy_(torch.from_numpy(reference.weights[2 * i]))
                layer.bias.copy_(torch.from_numpy(reference.weights[2 * i + 1]))
        if mode is TransferMode.head:
            for layer in linears[:-1]:
                layer.requires_grad_(False)

    x = torch.tensor((x_raw - x_mean) / x_std, dtype=torch.float32)
    y_log = torch.tensor((log_y - y_mean) / y_std, dtype=torch.float32)
    y_abs = torch.tensor(y, dtype=torch.float32)
    n = len(y)
    n_val = round(n * config.val_fraction) if n * config.val_fraction >= 1 else 0
    perm = torch.randperm(n, generator=gen)
    val_idx, train_idx = perm[:n_val], perm[n_val:]

    def loss_of(out: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        if config.loss is Loss.mse:
            return torch.mean((out - y_log[idx]) ** 2)
        pred = torch.exp(out * y_std + y_mean)
        return torch.mean(torch.abs(pred - y_abs[idx]) / y_abs[idx])

    params = [p for p in net.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=config.learning_rate)
    monitor = val_idx if n_val else train_idx
    best_loss, best_epoch = math.inf, 0
    best_state = {k: v.clone() for k, v in net.state_dict().items()}
    for epoch in range(1, config.epochs + 1):
        net.train()
        order = train_idx[torch.randperm(len(train_idx), generator=gen)]
        for start in range(0, len(order), config.batch_size):
            idx = order[start : start + config.batch_size]
            optimizer.zero_grad()
            loss = loss_of(net(x[idx]).squeeze(1), idx)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
        net.eval()
        with torch.no_grad():
            current = float(loss_of(net(x[monitor]).squeeze(1), monitor))
        if current < best_loss:
            best_loss, best_epoch = current, epoch
            best_state = {k: v.clone() for k, v in net.state_dict().items()}
    net.load_state_dict(best_state)
    weights: list[FloatArray] = []
    for layer in _linears(net):
        weights += [
            layer.weight.detach().double().numpy().copy(),
            layer.bias.detach().double().numpy().copy(),
        ]
    model = TargetModel(tuple(weights), x_mean, x_std, y_mean, y_std)
    report = FitReport(
        train_points=len(train_idx), val_points=n_val, best_epoch=best_epoch, best_loss=best_loss
    )
    return model, report


# ---------------------------------------------------------------- predictor


def mape(predicted: FloatArray, actual: FloatArray) -> float:
    """Mean absolute percentage error, in percent."""
    return float(np.mean(np.abs(predicted - actual) / actual) * 100.0)


class PredictionReport(BaseModel):
    """What a transfer (or scratch fit) did: sizes, cross-validated errors, power margins."""

    model_config = ConfigDict(extra="forbid")

    reference: str | None  # "<board>/<model>@<twin version>", None when trained from scratch
    profiled_points: int
    transfer_mode: TransferMode | None
    loss: Loss
    folds: int
    margin_quantile: float
    cv_mape_pct: dict[str, float]  # out-of-fold MAPE on the profiled points, per target
    power_margin: dict[str, float]  # relative margin added to predicted power, per power target
    best_epochs: dict[str, int]


@dataclass(frozen=True)
class Predictor:
    """An ensemble of MLPs per target plus relative power margins learned from residuals.

    Members are the model fitted on every profiled point and the cross-validation fold models;
    their geometric mean is the prediction (averaging cuts the variance of 50-point fits).
    """

    models: Mapping[Target, tuple[TargetModel, ...]]
    power_margin: Mapping[Target, float]
    # measured / out-of-fold predicted - 1 per profiled point, for each power target
    residuals: Mapping[Target, FloatArray] = field(default_factory=dict)

    def predict(self, grid: IntArray, *, with_margin: bool = True) -> dict[Target, FloatArray]:
        """Predicted targets per grid row; power times (1 + margin) unless told otherwise."""
        out = {
            t: np.exp(np.mean([np.log(m.predict(grid)) for m in members], axis=0))
            for t, members in self.models.items()
        }
        return self.apply_margin(out) if with_margin else self._clamped(out)

    def apply_margin(self, raw: Mapping[Target, FloatArray]) -> dict[Target, FloatArray]:
        """Margin-adjusted copies of raw predictions (power × (1 + margin))."""
        out = dict(raw)
        for t, margin in self.power_margin.items():
            out[t] = out[t] * (1.0 + margin)
        return self._clamped(out)

    @staticmethod
    def _clamped(out: dict[Target, FloatArray]) -> dict[Target, FloatArray]:
        if Target.peak_power in out and Target.mean_power in out:
            # A mean never exceeds the peak; the two MLPs are fitted independently.
            out[Target.mean_power] = np.minimum(out[Target.mean_power], out[Target.peak_power])
        return out

    def with_margin_quantile(self, quantile: float) -> Predictor:
        """The same models with margins recomputed at another quantile of the residuals."""
        margins = {t: _margin(r, quantile) for t, r in self.residuals.items()}
        return Predictor(self.models, margins, self.residuals)


def _margin(residuals: FloatArray, quantile: float) -> float:
    return max(0.0, float(np.quantile(residuals, quantile)))


def _folds(n: int, folds: int, seed: int) -> list[IntArray]:
    perm = np.random.default_rng(seed).permutation(n)
    return [np.sort(part).astype(np.int64) for part in np.array_split(perm, folds)]


def fit_predictor(
    grid: IntArray,
    measured: Mapping[Target, FloatArray],
    config: TrainConfig,
    *,
    reference: Mapping[Target, TargetModel] | None = None,
    reference_name: str | None = None,
    mode: TransferMode = TransferMode.all,
    folds: int = 5,
    margin_quantile: float = 0.9,
    ensemble: bool = True,
) -> tuple[Predictor, PredictionReport]:
    """Transfer (or, without a reference, train from scratch) one MLP per measured target.

    The power margin is the `margin_quantile` of out-of-fold under-prediction (measured /
    predicted - 1) over `folds` folds of the profiled points, floored at 0: a selection that
    trusts predicted power × (1 + margin) stays under the limit that often on unseen points.
    """
    if not 0.0 < margin_quantile <= 1.0:
        raise ValueError(f"margin_quantile must be in (0, 1], got {margin_quantile}")
    n = len(grid)
    folds = max(0, min(folds, n))
    models: dict[Target, tuple[TargetModel, ...]] = {}
    margins: dict[Target, float] = {}
    residuals: dict[Target, FloatArray] = {}
    cv: dict[str, float] = {}
    epochs: dict[str, int] = {}
    for target, y in measured.items():
        ref = None if reference is None else reference[target]
        model, fit = fit_target(grid, y, config, reference=ref, mode=mode)
        members = [model]
        epochs[target.value] = fit.best_epoch
        if folds >= 2:
            oof = np.empty(n)
            for j, held in enumerate(_folds(n, folds, config.seed)):
                keep = np.setdiff1d(np.arange(n), held)
                fold_config = config.model_copy(update={"seed": config.seed * 1000 + j + 1})
                fold, _ = fit_target(grid[keep], y[keep], fold_config, reference=ref, mode=mode)
                oof[held] = fold.predict(grid[held])
                members.append(fold)
            cv[target.value] = mape(oof, y)
            if target in POWER_TARGETS:
                residuals[target] = y / oof - 1.0
                margins[target] = _margin(residuals[target], margin_quantile)
        models[target] = tuple(members) if ensemble else (model,)
    report = PredictionReport(
        reference=reference_name if reference is not None else None,
        profiled_points=n,
        transfer_mode=mode if reference is not None else None,
        loss=config.loss,
        folds=folds,
        margin_quantile=margin_quantile,
        cv_mape_pct=cv,
        power_margin={t.value: m for t, m in margins.items()},
        best_epochs=epochs,
    )
    return Predictor(models, margins, residuals), report
