"""A population prior on the target-vs-proxy tilt, pooled over (proxy, target) pairs (numpy).

Each pair whose N(b) is known on both sets at ≥ 2 batch sizes gives a tilt: the least-squares
slope of `log N_target(b) − log N_proxy(b)` per doubling of b. Their mean is the prior mean of a
new pair's tilt, their spread its doubt; below `MIN_PAIRS` pairs the population is not trusted
and the prior stays centred on no tilt.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Pairs needed before the population's mean is trusted (issue 41).
MIN_PAIRS = 6
#: The doubt on a new pair's tilt never falls below this (per doubling): a few agreeing pairs
#: do not make the next one certain.
MIN_SD = 0.03


@dataclass(frozen=True)
class TiltPair:
    """One (proxy, target) pair's tilt per doubling of b."""

    label: str
    tilt: float


#: The (proxy, target) pairs of the committed paper benches (docs/benchmarks/paper/*.json):
#: each pair's tilt of the geometric mean N over its seeds. `tests/bench/paper/test_tilt.py`
#: recomputes them from the committed runs.
BENCH_PAIRS: tuple[TiltPair, ...] = (
    TiltPair("small/resnet8-w025/mnist→fashion-mnist", -0.03051916555017266),
    TiltPair("small/resnet8-w025/mnist→digits", 0.19433336045523733),
    TiltPair("small/mobilenetv2-w025/mnist→fashion-mnist", -0.007101851917772276),
    TiltPair("small/mobilenetv2-w025/mnist→digits", -0.07083166755053044),
    TiltPair("small/charformer-small/tom-sawyer→sherlock-holmes", -0.07132355890999634),
    TiltPair("small/charformer-small/tom-sawyer→austen-emma", -0.09342459564045894),
    TiltPair("cpu/resnet8-w025/mnist→fashion-mnist", -0.06121583755675117),
    TiltPair("cpu/charformer-small/tom-sawyer→sherlock-holmes", -0.0029375003925115415),
    TiltPair("cpu/mobilenetv2-tiny/mnist→fashion-mnist", -0.07595605930398223),
)


@dataclass(frozen=True)
class TiltPrior:
    """The prior on a new pair's tilt, and what it was pooled from."""

    mean: float
    sd: float
    pairs: int
    trusted: bool
    labels: tuple[str, ...] = ()


def pair_tilt(
    batch_sizes: Sequence[int],
    proxy_samples: Sequence[float | None],
    target_samples: Sequence[float | None],
) -> float | None:
    """The slope of log N_target − log N_proxy against log2 b (None: < 2 sizes known on both)."""
    x, y = [], []
    for b, p, t in zip(batch_sizes, proxy_samples, target_samples, strict=True):
        if p is not None and t is not None and p > 0 and t > 0:
            x.append(math.log2(b))
            y.append(math.log(t) - math.log(p))
    if len(set(x)) < 2:
        return None
    slope = float(np.polyfit(np.array(x), np.array(y), 1)[0])
    return slope if math.isfinite(slope) else None


def population_tilt(
    pairs: Sequence[TiltPair], *, min_pairs: int = MIN_PAIRS, default_sd: float = 0.2
) -> TiltPrior:
    """The pooled prior: mean of the pairs' tilts, sd their spread widened for a new pair
    (`sd·√(1 + 1/n)`, at least `MIN_SD`); untrusted (mean 0, `default_sd`) below `min_pairs`."""
    labels = tuple(p.label for p in pairs)
    tilts = [p.tilt for p in pairs if math.isfinite(p.tilt)]
    if len(tilts) < max(min_pairs, 2):
        return TiltPrior(0.0, default_sd, len(tilts), False, labels)
    mean = statistics.fmean(tilts)
    sd = max(statistics.stdev(tilts) * math.sqrt(1 + 1 / len(tilts)), MIN_SD)
    return TiltPrior(mean, min(sd, default_sd), len(tilts), True, labels)


__all__ = [
    "BENCH_PAIRS",
    "MIN_PAIRS",
    "MIN_SD",
    "TiltPair",
    "TiltPrior",
    "pair_tilt",
    "population_tilt",
]
