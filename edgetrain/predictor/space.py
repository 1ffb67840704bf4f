"""The (batch size, full power mode) grid the predictor works on: axes, features, sampling,
and the tables made from predictions. numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, field_validator

from edgetrain.api.enums import StrEnum
from edgetrain.api.profile import ProfilePoint
from edgetrain.planner.lut import Lut

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Feature columns of a grid array, in order. Columns 1-4 are the LUT's mode order.
FEATURES: tuple[str, ...] = ("batch_size", "gpu_freq_hz", "cpu_freq_hz", "cpu_cores", "emc_freq_hz")


class Target(StrEnum):
    """What one MLP predicts (profile-CSV column names)."""

    time = "time_per_sample_s"
    peak_power = "peak_power_w"
    mean_power = "mean_power_w"


POWER_TARGETS: tuple[Target, ...] = (Target.peak_power, Target.mean_power)


class ModeSpace(BaseModel):
    """A Cartesian grid of batch sizes and full power modes: every combination is a point."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_sizes: tuple[int, ...]
    gpu_freqs_hz: tuple[int, ...]
    cpu_freqs_hz: tuple[int, ...]
    cpu_cores: tuple[int, ...]
    emc_freqs_hz: tuple[int, ...]

    @field_validator("*")
    @classmethod
    def _sorted_unique_positive(cls, values: tuple[int, ...]) -> tuple[int, ...]:
        # Sorted axes make the flattened grid match the LUT's sorted mode columns.
        out = tuple(sorted(set(values)))
        if not out or out[0] <= 0:
            raise ValueError("every axis needs at least one positive value")
        return out

    def axes(self) -> list[IntArray]:
        """The five axes in FEATURES order."""
        return [
            np.asarray(getattr(self, name if name != "batch_size" else "batch_sizes"), np.int64)
            for name in ("batch_size", "gpu_freqs_hz", "cpu_freqs_hz", "cpu_cores", "emc_freqs_hz")
        ]

    @property
    def shape(self) -> tuple[int, ...]:
        """Levels per axis."""
        return tuple(len(a) for a in self.axes())

    @property
    def size(self) -> int:
        """Number of (batch size, mode) points."""
        return math.prod(self.shape)

    @property
    def mode_count(self) -> int:
        """Number of power modes (points per batch size)."""
        return self.size // len(self.batch_sizes)

    def grid(self, flat_indices: IntArray | None = None) -> IntArray:
        """Points as rows (b, gpu, cpu, cores, emc); all of them, in LUT order, by default."""
        axes = self.axes()
        if flat_indices is None:
            mesh = np.meshgrid(*axes, indexing="ij")
            return np.stack([m.ravel() for m in mesh], axis=1)
        levels = np.unravel_index(np.asarray(flat_indices, dtype=np.int64), self.shape)
        return np.stack([a[i] for a, i in zip(axes, levels, strict=True)], axis=1)


def features(grid: IntArray) -> FloatArray:
    """Raw features: log2 batch size, clocks in GHz, core count (standardised later)."""
    g = np.asarray(grid, dtype=np.float64)
    return np.stack(
        [np.log2(g[:, 0]), g[:, 1] / 1e9, g[:, 2] / 1e9, g[:, 3], g[:, 4] / 1e9], axis=1
    )


# ---------------------------------------------------------------- sampling


def cover_sample(space: ModeSpace, k: int, seed: int, candidates: int = 32) -> IntArray:
    """k distinct flat indices that cover the grid: the maximin of seeded Latin hypercubes.

    Each axis is cut into k strata and every stratum is hit once, so every batch size and every
    clock level gets its share of the k points; of `candidates` such designs the one whose
    closest pair is farthest apart (in level-index units scaled to [0, 1]) is kept.
    """
    if not 1 <= k <= space.size:
        raise ValueError(f"k must be in 1..{space.size}, got {k}")
    rng = np.random.default_rng(seed)
    shape = np.asarray(space.shape)
    best: IntArray | None = None
    best_score = -1.0
    for _ in range(candidates):
        levels = np.empty((k, len(shape)), dtype=np.int64)
        for d, n in enumerate(shape):
            strata = np.floor((np.arange(k) + rng.random(k)) / k * n).astype(np.int64)
            levels[:, d] = rng.permutation(strata)
        flat = _dedupe(
            np.asarray(np.ravel_multi_index(levels.T, tuple(shape)), np.int64), space.size, rng
        )
        unit = np.stack(np.unravel_index(flat, tuple(shape)), axis=1) / np.maximum(shape - 1, 1)
        dist = np.sqrt(((unit[:, None, :] - unit[None, :, :]) ** 2).sum(-1))
        np.fill_diagonal(dist, np.inf)
        score = float(dist.min()) if k > 1 else 0.0
        if score > best_score:
            best, best_score = flat, score
    assert best is not None
    return best


def random_sample(space: ModeSpace, k: int, seed: int) -> IntArray:
    """k distinct flat indices drawn uniformly (the paper's random profiling)."""
    if not 1 <= k <= space.size:
        raise ValueError(f"k must be in 1..{space.size}, got {k}")
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(space.size, size=k, replace=False)).astype(np.int64)


def _dedupe(flat: IntArray, size: int, rng: np.random.Generator) -> IntArray:
    seen: set[int] = set()
    out: list[int] = []
    for value in flat.tolist():
        while value in seen:  # a collision: redraw uniformly (rare unless k nears the grid size)
            value = int(rng.integers(size))
        seen.add(value)
        out.append(value)
    return np.asarray(out, dtype=np.int64)


# ---------------------------------------------------------------- tables


def predicted_lut(space: ModeSpace, predictions: Mapping[Target, FloatArray]) -> Lut:
    """Dense LUT (|B| × modes) from predictions over `space.grid()` (in its order)."""
    b = len(space.batch_sizes)
    modes = space.grid()[: space.mode_count, 1:]
    shape = (b, space.mode_count)
    return Lut(
        np.asarray(space.batch_sizes, dtype=np.int64),
        modes.astype(np.int64),
        predictions[Target.time].reshape(shape).astype(np.float64),
        predictions[Target.peak_power].reshape(shape).astype(np.float64),
        predictions[Target.mean_power].reshape(shape).astype(np.float64),
    )


def profile_points(
    grid: IntArray,
    predictions: Mapping[Target, FloatArray],
    measured: Mapping[int, ProfilePoint] | None = None,
) -> list[ProfilePoint]:
    """Profile-CSV points: predictions per row, measured points (by row index) kept as measured."""
    measured = measured or {}
    time, peak, mean = (predictions[t] for t in Target)
    out: list[ProfilePoint] = []
    for i, row in enumerate(grid.tolist()):
        point = measured.get(i)
        if point is None:
            point = ProfilePoint.model_construct(
                batch_size=row[0],
                gpu_freq_hz=row[1],
                cpu_freq_hz=row[2],
                cpu_cores=row[3],
                emc_freq_hz=row[4],
                time_per_sample_s=float(time[i]),
                peak_power_w=float(peak[i]),
                mean_power_w=float(min(mean[i], peak[i])),
            )
        out.append(point)
    return out


def grid_rows(space: ModeSpace, points: Sequence[ProfilePoint]) -> IntArray:
    """Flat grid index of each point (raises ValueError if a point is off the grid)."""
    axes = space.axes()
    index: list[list[int]] = []
    for p in points:
        values = (p.batch_size, p.gpu_freq_hz, p.cpu_freq_hz, p.cpu_cores, p.emc_freq_hz)
        row: list[int] = []
        for axis, value in zip(axes, values, strict=True):
            hits = np.flatnonzero(axis == value)
            if value is None or hits.size == 0:
                raise ValueError(f"point {p.batch_size}, {p.mode} is not on the mode grid")
            row.append(int(hits[0]))
        index.append(row)
    flat = np.ravel_multi_index(np.asarray(index).T, space.shape)
    return np.asarray(flat, dtype=np.int64)
