"""The benchmark's Markdown tables: headline, main table and predicted profiles."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from edgetrain.bench.paper.arithmetic import Stat, mean_std
from edgetrain.bench.paper.results import CaseSummary, PaperBenchSummary


def fmt_stat(stat: Stat, digits: int = 1, scale: float = 1.0) -> str:
    """`mean ± std` (values × scale), with the count of seeds that missed the target."""
    if stat.mean is None or stat.std is None:
        return "miss" if stat.missing else "—"
    text = f"{stat.mean * scale:.{digits}f} ± {stat.std * scale:.{digits}f}"
    return text + (f" ({stat.missing} miss)" if stat.missing else "")


def fmt_ci(stat: Stat, digits: int = 3, scale: float = 1.0) -> str:
    """`mean [low, high]` (the 95 % t-interval), or `mean ± std` below two values."""
    if stat.mean is None or stat.ci95 is None:
        return fmt_stat(stat, digits, scale)
    lo, hi = stat.ci95
    text = f"{stat.mean * scale:.{digits}f} [{lo * scale:.{digits}f}, {hi * scale:.{digits}f}]"
    return text + (f" ({stat.missing} miss)" if stat.missing else "")


def fmt_limit(limit_w: float | None) -> str:
    """`4.5 W`, or `none`."""
    return "none" if limit_w is None else f"{limit_w:g} W"


def _choices(s: CaseSummary) -> str:
    groups = (
        s.b1_choices,
        s.b2_choices,
        s.edgetrain_choices,
        s.full_choices,
        s.predicted_choices,
        s.oracle_choices,
    )
    return " · ".join(",".join(c) for c in groups)


def headline_lines(result: PaperBenchSummary) -> list[str]:
    """Pooled ratios with intervals, the low limit per board, overhead, predicted vs goals."""
    h = result.headline
    if h is None:
        return []
    n = len(result.seeds)
    lines = [
        "",
        "## Headline (simulated device; 95 % Student-t intervals over the "
        f"{n} seeds of the per-seed mean over the {h.cells} main-table cells)",
        "",
        f"- edgetrain/oracle: **{fmt_ci(h.edgetrain_over_oracle)}** (frontier profile);"
        f" full grid {fmt_ci(h.full_over_oracle)}; predicted {fmt_ci(h.predicted_over_oracle)}.",
        "- Profiling overhead (device time of the measured points / that plan's training time,"
        " %): "
        + "; ".join(
            f"{name} {fmt_ci(stat, 2)} (cells {lo:.2f}–{hi:.2f})"
            for name, stat in h.overhead_pct.items()
            for lo, hi in [h.overhead_cell_range_pct[name]]
        )
        + ".",
        "",
        "Each board's lowest limit (B1/edgetrain and B2/edgetrain > 1: edgetrain is faster):",
        "",
        "| board | limit | model | B1/edgetrain | B2/edgetrain | edgetrain/oracle |",
        "|---|---|---|---|---|---|",
    ]
    for r in h.low_limit:
        lines.append(
            f"| {r.board} | {fmt_limit(r.power_limit_w)} | {r.workload or '**all**'} |"
            f" {fmt_ci(r.b1_over_edgetrain, 2)} | {fmt_ci(r.b2_over_edgetrain, 2)} |"
            f" {fmt_ci(r.edgetrain_over_oracle)} |"
        )
    met = {True: "met", False: "**missed**"}
    goals = h.goals
    lines += [
        "",
        "Predicted profile against the goals:",
        "",
        "| goal | value | |",
        "|---|---|---|",
        f"| peak-power MAPE ≤ 4 % | {fmt_ci(h.peak_power_mape_pct, 2)} % (max"
        f" {h.peak_power_mape_max_pct:.2f} %) | {met[goals['power MAPE ≤ 4 %']]} |",
        f"| time MAPE ≤ 8 % | {fmt_ci(h.time_mape_pct, 2)} % (max {h.time_mape_max_pct:.2f} %) |"
        f" {met[goals['time MAPE ≤ 8 %']]} |",
        f"| TTA penalty vs full ≤ 1 % | {fmt_ci(h.penalty_pct, 2)} %; {h.penalty_cases_over_1pct}"
        f" of {h.penalty_cases} cases above 1 %, worst {h.penalty_max_pct:.1f} % |"
        f" {met[goals['TTA penalty ≤ 1 %']]} |",
        f"| no choice above limit + 1 W | {h.predicted_over_limit_1w} of {h.limited_cases}"
        f" limited cases (frontier: {h.edgetrain_over_limit_1w}) |"
        f" {met[goals['no choice above limit + 1 W']]} |",
    ]
    return lines


def main_table_lines(result: PaperBenchSummary) -> list[str]:
    """One row per (model, target, board, limit), over seeds."""
    lines = ["", "## Time to accuracy (Tables 2–4; simulated device)", ""]
    header = (
        "| model | target | board | limit | oracle s | edgetrain/oracle [95 % CI] | full/oracle |"
        " predicted/oracle | predicted/full | B1/edgetrain | B2/edgetrain | overhead % frontier ·"
        " full · predicted | points frontier · predicted / grid | over limit | B1 · B2 ·"
        " edgetrain · full · predicted · oracle (b@MHz) |"
    )
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    for s in result.summaries:
        overhead = " · ".join(
            fmt_stat(st, 2, 100)
            for st in (s.overhead_share, s.full_overhead_share, s.predicted_overhead_share)
        )
        over = (
            f"{s.edgetrain_over_limit} · {s.predicted_over_limit}"
            f" ({s.predicted_over_limit_1w} > +1 W)"
        )
        lines.append(
            f"| {s.workload} | {s.target} | {s.board} | {fmt_limit(s.power_limit_w)} |"
            f" {fmt_stat(s.oracle_tta_s)} | {fmt_ci(s.edgetrain_over_oracle)} |"
            f" {fmt_stat(s.full_over_oracle, 3)} | {fmt_stat(s.predicted_over_oracle, 3)} |"
            f" {fmt_stat(s.predicted_over_full, 3)} |"
            f" {fmt_stat(s.b1_over_edgetrain, 2)} | {fmt_stat(s.b2_over_edgetrain, 2)} |"
            f" {overhead} | {fmt_stat(s.frontier_points, 0)} · {s.predicted_points} /"
            f" {s.grid_points} | {over} | {_choices(s)} |"
        )
    lines += [
        "",
        "'over limit': seeds whose edgetrain (frontier) · predicted choice is truly above the"
        " limit. Energy per method is in the JSON beside this table.",
    ]
    return lines


def _mean_max(values: Sequence[float]) -> str:
    return f"{statistics.fmean(values):.2f} ({max(values):.2f})" if values else "—"


def prediction_lines(result: PaperBenchSummary) -> list[str]:
    """Predicted profiles per (model, board): MAPE mean (max) over seeds, margin, cost."""
    if not result.predictions:
        return []
    lines = [
        "",
        "## Predicted profiles (PowerTrain transfer; MAPE of the raw MLP against the twin)",
        "",
        "| model | board | measured / grid | time MAPE % mean (max) | peak-power MAPE % |"
        " mean-power MAPE % | power margin % | profiling s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[int]] = {}
    for i, f in enumerate(result.predictions):
        groups.setdefault((f.workload, f.board), []).append(i)
    for (workload, board), idx in groups.items():
        fits = [result.predictions[i] for i in idx]
        margin: Stat = mean_std(100 * f.power_margin for f in fits)
        lines.append(
            f"| {workload} | {board} | {fits[0].measured_points} / {fits[0].grid_points} |"
            f" {_mean_max([f.time_mape_pct for f in fits])} |"
            f" {_mean_max([f.peak_power_mape_pct for f in fits])} |"
            f" {_mean_max([f.mean_power_mape_pct for f in fits])} |"
            f" {fmt_stat(margin, 1)} | {statistics.fmean(f.device_s for f in fits):.0f} |"
        )
    return lines
