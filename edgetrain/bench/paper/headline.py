"""The headline figures: ratios pooled over the main table per seed, then a t-interval over seeds.

Seeds are the independent replicates (each re-trains every N(b) and re-draws the profile noise),
so a cell's values are first averaged within a seed and the interval is taken over seeds.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from edgetrain.api.plan import PowerMetric
from edgetrain.bench.paper.arithmetic import Stat, mean_std, ratio
from edgetrain.bench.paper.config import BenchConfig
from edgetrain.bench.paper.evaluate import over_limit_w
from edgetrain.bench.paper.profiles import PredictionFit
from edgetrain.bench.paper.results import (
    BoardRatios,
    CaseOutcome,
    ChoiceOutcome,
    Headline,
    RecurringJob,
)

#: The goals of issue 18 for the predicted profile (PowerTrain's accuracy, and a safe plan).
GOAL_POWER_MAPE_PCT = 4.0
GOAL_TIME_MAPE_PCT = 8.0
GOAL_PENALTY_PCT = 1.0
GOAL_OVER_LIMIT_W = 1.0

CaseValue = Callable[[CaseOutcome], float | None]


def _tta(choice: ChoiceOutcome | None) -> float | None:
    return None if choice is None else choice.tta_s


def main_cases(config: BenchConfig, cases: Sequence[CaseOutcome]) -> list[CaseOutcome]:
    """The cases of the main table: each model's configured proxy on its configured targets."""
    rows = {(w.label, w.proxy, t) for w in config.workloads for t in w.targets}
    return [c for c in cases if (c.workload, c.proxy, c.target) in rows]


def per_seed(cases: Sequence[CaseOutcome], value: CaseValue) -> Stat:
    """Mean of `value` within each seed (its missing values skipped), then the Stat over seeds."""
    by_seed: dict[int, list[float]] = {}
    for c in cases:
        v = value(c)
        by_seed.setdefault(c.seed, [])
        if v is not None:
            by_seed[c.seed].append(v)
    return mean_std(statistics.fmean(vs) if vs else None for vs in by_seed.values())


def _cell_means(cases: Sequence[CaseOutcome], value: CaseValue) -> list[float]:
    cells: dict[tuple[str, str, str, float | None], list[float]] = {}
    for c in cases:
        v = value(c)
        if v is not None:
            cells.setdefault((c.workload, c.target, c.board, c.power_limit_w), []).append(v)
    return [statistics.fmean(vs) for vs in cells.values()]


def _pct(share: float | None) -> float | None:
    return None if share is None else 100.0 * share


def low_limit_ratios(config: BenchConfig, cases: Sequence[CaseOutcome]) -> list[BoardRatios]:
    """Each board's lowest limit: every model pooled, then each model."""
    out: list[BoardRatios] = []
    for board in config.boards:
        limits = [w for w in board.power_limits_w if w is not None]
        if not limits:
            continue
        low = min(limits)
        at = [c for c in cases if c.board == board.board and c.power_limit_w == low]
        groups: list[tuple[str | None, list[CaseOutcome]]] = [(None, at)]
        groups += [(w.label, [c for c in at if c.workload == w.label]) for w in config.workloads]
        for label, group in groups:
            out.append(
                BoardRatios(
                    board=board.board,
                    workload=label,
                    power_limit_w=low,
                    b1_over_edgetrain=per_seed(
                        group, lambda c: ratio(_tta(c.b1), _tta(c.edgetrain))
                    ),
                    b2_over_edgetrain=per_seed(
                        group, lambda c: ratio(_tta(c.b2), _tta(c.edgetrain))
                    ),
                    edgetrain_over_oracle=per_seed(
                        group, lambda c: ratio(_tta(c.edgetrain), _tta(c.oracle))
                    ),
                )
            )
    return out


def _at_most(stat: Stat, goal: float) -> bool:
    """The mean meets the goal (no value: not met)."""
    return stat.mean is not None and stat.mean <= goal


def _penalty_pct(c: CaseOutcome) -> float | None:
    r = ratio(_tta(c.predicted), _tta(c.full))
    return None if r is None else 100.0 * (r - 1.0)


def headline(
    config: BenchConfig,
    cases: Sequence[CaseOutcome],
    fits: Sequence[PredictionFit],
    recurring: Sequence[RecurringJob] = (),
) -> Headline:
    """The headline over the main-table cases, the predicted profiles' fits and the recurring
    sequences."""
    from edgetrain.bench.paper.recurring import informed_stat, recurring_goals, recurring_stats

    per_k = recurring_stats(recurring)
    main = main_cases(config, cases)
    metric: PowerMetric = config.power_metric
    overhead: dict[str, CaseValue] = {
        "frontier": lambda c: _pct(c.overhead_share),
        "full": lambda c: _pct(c.full_overhead_share),
        "predicted": lambda c: _pct(c.predicted_overhead_share),
    }
    ranges: dict[str, tuple[float, float]] = {}
    for name, value in overhead.items():
        means = _cell_means(main, value)
        ranges[name] = (min(means), max(means)) if means else (float("nan"), float("nan"))
    penalties = [p for c in main if (p := _penalty_pct(c)) is not None]
    limited = [c for c in main if c.power_limit_w is not None]
    time_mape = [f.time_mape_pct for f in fits]
    power_mape = [f.peak_power_mape_pct for f in fits]
    penalty = per_seed(main, _penalty_pct)
    over_1w = sum(1 for c in limited if over_limit_w(c.predicted, c.power_limit_w, metric) > 1.0)
    time_stat, power_stat = mean_std(time_mape), mean_std(power_mape)
    return Headline(
        cells=len({(c.workload, c.target, c.board, c.power_limit_w) for c in main}),
        edgetrain_over_oracle=per_seed(main, lambda c: ratio(_tta(c.edgetrain), _tta(c.oracle))),
        full_over_oracle=per_seed(main, lambda c: ratio(_tta(c.full), _tta(c.oracle))),
        predicted_over_oracle=per_seed(main, lambda c: ratio(_tta(c.predicted), _tta(c.oracle))),
        low_limit=low_limit_ratios(config, main),
        overhead_pct={name: per_seed(main, value) for name, value in overhead.items()},
        overhead_cell_range_pct=ranges,
        time_mape_pct=time_stat,
        time_mape_max_pct=max(time_mape, default=float("nan")),
        peak_power_mape_pct=power_stat,
        peak_power_mape_max_pct=max(power_mape, default=float("nan")),
        penalty_pct=penalty,
        penalty_cases=len(penalties),
        penalty_cases_over_1pct=sum(1 for p in penalties if p > GOAL_PENALTY_PCT),
        penalty_max_pct=max(penalties, default=float("nan")),
        limited_cases=len(limited),
        predicted_over_limit_1w=over_1w,
        edgetrain_over_limit_1w=sum(
            1 for c in limited if over_limit_w(c.edgetrain, c.power_limit_w, metric) > 1.0
        ),
        goals={
            "power MAPE ≤ 4 %": _at_most(power_stat, GOAL_POWER_MAPE_PCT),
            "time MAPE ≤ 8 %": _at_most(time_stat, GOAL_TIME_MAPE_PCT),
            "TTA penalty ≤ 1 %": _at_most(penalty, GOAL_PENALTY_PCT),
            "no choice above limit + 1 W": over_1w == 0,
            **(recurring_goals(per_k) if per_k else {}),
        },
        recurring_over_oracle=per_k,
        recurring_informed=informed_stat(recurring) if recurring else None,
    )
