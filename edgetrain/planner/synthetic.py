"""Synthetic LUTs shaped like real profiles, for benchmarks and property tests."""

from __future__ import annotations

import numpy as np

from edgetrain.planner.lut import Lut


def synthetic_lut(
    batch_sizes: list[int], n_modes: int, *, monotone: bool = True, seed: int = 0
) -> Lut:
    """A |B| × n_modes LUT: time falls and power rises with frequency unless `monotone` is off.

    Shapes only (not a device model): per-sample time ~ (overhead/b + work)/f, power ~
    idle + k·b^0.3·f·V(f)² with V flat below a knee. Non-monotone LUTs add ±15 % noise, as full
    power modes (CPU/memory clocks interleaved with the GPU's) do.
    """
    rng = np.random.default_rng(seed)
    f = np.linspace(0.1, 1.0, n_modes)
    b = np.asarray(batch_sizes, dtype=np.float64)[:, None]
    volt = np.where(f < 0.5, 0.6, 0.6 + 0.8 * (f - 0.5))
    time = (0.02 / b + 0.001) / f
    power = 1.2 + 6.0 * (b / b.max()) ** 0.3 * f * volt**2 / 0.36 / 2.0
    if not monotone:
        time = time * rng.uniform(0.85, 1.15, time.shape)
        power = power * rng.uniform(0.85, 1.15, power.shape)
    freqs_hz = np.round(np.linspace(76.8e6, 1.3e9, n_modes)).astype(np.int64)
    freqs_hz = np.maximum.accumulate(freqs_hz + np.arange(n_modes))  # strictly increasing
    mean = power * 0.85
    return Lut.from_grid(list(batch_sizes), freqs_hz.tolist(), time, power, mean)
