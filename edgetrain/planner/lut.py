"""Look-up tables: profile points as dense (batch size × power mode) matrices."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from edgetrain.api.plan import PowerMetric
from edgetrain.api.profile import MODE_COLUMNS, ProfilePoint

FloatMatrix = NDArray[np.float64]
IntArray = NDArray[np.int64]


class MonotoneRow(NamedTuple):
    """A row where power rises and time falls with the mode index (measured cells only)."""

    columns: IntArray
    power_w: NDArray[np.float64]
    time_per_sample_s: NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class Lut:
    """Time and power per (batch size, mode); NaN where a point was not measured.

    Modes are rows of `modes` = (gpu_freq_hz, cpu_freq_hz, cpu_cores, emc_freq_hz), sorted, with 0
    for a component the profile does not set.
    """

    batch_sizes: IntArray
    modes: IntArray
    time_per_sample_s: FloatMatrix
    peak_power_w: FloatMatrix
    mean_power_w: FloatMatrix
    _monotone: dict[PowerMetric, list[MonotoneRow | None]] = field(
        default_factory=dict, init=False, repr=False
    )

    @classmethod
    def from_points(cls, points: Iterable[ProfilePoint]) -> Lut:
        """Build the matrices from profile points (each (batch size, mode) at most once)."""
        pts = list(points)
        if not pts:
            raise ValueError("a LUT needs at least one profile point")
        batch_sizes = np.array(sorted({p.batch_size for p in pts}), dtype=np.int64)
        modes = np.array(sorted({p.mode for p in pts}), dtype=np.int64).reshape(-1, 4)
        row_of = {int(b): i for i, b in enumerate(batch_sizes)}
        col_of = {tuple(int(v) for v in m): j for j, m in enumerate(modes)}
        shape = (len(batch_sizes), len(modes))
        time, peak, mean = (np.full(shape, np.nan) for _ in range(3))
        for p in pts:
            i, j = row_of[p.batch_size], col_of[p.mode]
            time[i, j], peak[i, j], mean[i, j] = p.time_per_sample_s, p.peak_power_w, p.mean_power_w
        return cls(batch_sizes, modes, time, peak, mean)

    @classmethod
    def from_grid(
        cls,
        batch_sizes: Sequence[int],
        gpu_freqs_hz: Sequence[int],
        time_per_sample_s: FloatMatrix,
        peak_power_w: FloatMatrix,
        mean_power_w: FloatMatrix | None = None,
    ) -> Lut:
        """Build from dense matrices over sorted batch sizes and GPU frequencies."""
        modes = np.zeros((len(gpu_freqs_hz), 4), dtype=np.int64)
        modes[:, 0] = gpu_freqs_hz
        if np.any(np.diff(np.asarray(batch_sizes)) <= 0) or np.any(np.diff(modes[:, 0]) <= 0):
            raise ValueError("batch sizes and GPU frequencies must be strictly increasing")
        peak = np.asarray(peak_power_w, dtype=np.float64)
        mean = peak if mean_power_w is None else np.asarray(mean_power_w, dtype=np.float64)
        return cls(
            np.asarray(batch_sizes, dtype=np.int64),
            modes,
            np.asarray(time_per_sample_s, dtype=np.float64),
            peak,
            mean,
        )

    @property
    def gpu_freqs_hz(self) -> IntArray:
        """GPU frequency of each mode column."""
        return self.modes[:, 0]

    @property
    def has_full_modes(self) -> bool:
        """True when modes set CPU, cores or memory frequency besides the GPU."""
        return bool(np.any(self.modes[:, 1:]))

    @property
    def measured(self) -> NDArray[np.bool_]:
        """Mask of measured cells."""
        return ~np.isnan(self.time_per_sample_s)

    def power(self, metric: PowerMetric) -> FloatMatrix:
        """The power matrix the limit is checked against."""
        return self.peak_power_w if metric is PowerMetric.peak else self.mean_power_w

    def mode_fields(self, column: int) -> dict[str, int | None]:
        """The mode of a column as profile-CSV fields (None for unset components)."""
        gpu, *rest = (int(v) for v in self.modes[column])
        out: dict[str, int | None] = {"gpu_freq_hz": gpu}
        for name, value in zip(MODE_COLUMNS, rest, strict=True):
            out[name] = value or None
        return out

    def monotone_rows(self, metric: PowerMetric) -> list[MonotoneRow | None]:
        """Per batch size, the measured cells if power strictly rises and time strictly falls.

        Computed once per metric: a limit that changes while training re-plans in O(|B| log |F|).
        """
        cached = self._monotone.get(metric)
        if cached is not None:
            return cached
        power = self.power(metric)
        rows: list[MonotoneRow | None] = []
        for i in range(len(self.batch_sizes)):
            cols = np.flatnonzero(self.measured[i])
            p, t = power[i, cols], self.time_per_sample_s[i, cols]
            ok = cols.size > 0 and bool(np.all(np.diff(p) > 0) and np.all(np.diff(t) < 0))
            rows.append(MonotoneRow(cols, p, t) if ok else None)
        self._monotone[metric] = rows
        return rows

    def to_points(self) -> list[ProfilePoint]:
        """The measured cells back as profile points."""
        out: list[ProfilePoint] = []
        for i, j in zip(*np.nonzero(self.measured), strict=True):
            out.append(
                ProfilePoint(
                    batch_size=int(self.batch_sizes[i]),
                    time_per_sample_s=float(self.time_per_sample_s[i, j]),
                    peak_power_w=float(self.peak_power_w[i, j]),
                    mean_power_w=float(self.mean_power_w[i, j]),
                    **self.mode_fields(int(j)),
                )
            )
        return out
