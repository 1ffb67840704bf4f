"""The recurring section of the bench's Markdown: issue 41's headline keys and goals, per job,
the policies compared on the same data, and the synthetic harness."""

from __future__ import annotations

import statistics

from edgetrain.bench.paper.arithmetic import Stat
from edgetrain.bench.paper.render_tables import fmt_ci
from edgetrain.bench.paper.results import KStat, PaperBenchSummary

MET = {True: "met", False: "**missed**"}


def _k(stat: KStat | None, digits: int = 3) -> str:
    if stat is None or stat.mean is None:
        return "—"
    return fmt_ci(Stat(mean=stat.mean, std=None, n=stat.n, ci95=stat.ci95), digits)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:+.1f} %"


def recurring_lines(result: PaperBenchSummary) -> list[str]:
    """Issue 41's recurring section (empty without a recurring column)."""
    h = result.headline
    if h is None or h.recurring_over_oracle is None or h.recurring_gain is None:
        return []
    rc = result.config.recurring
    p = rc.policy
    over, gain, floor = h.recurring_over_oracle, h.recurring_gain, h.floor_over_oracle
    cost = h.edgetrain_estimate
    goals = {name: ok for name, ok in h.goals.items()
             if name.startswith(("recurring", "edgetrain_over_oracle"))}  # fmt: skip
    lines = [
        "",
        "## Recurring jobs (issue 41; simulated device)",
        "",
        f"Each main-table cell, board and limit runs {rc.jobs} jobs in a row, once per seed j: job"
        " k plans from the frontier profile of seed j, the default estimate (the proxy merged"
        f" over {p.proxy_seeds} seeds: the {p.proxy_seeds} after j in turn, j left out) and the"
        " observations of jobs 1 … k−1 (each the measured N on the target set at the batch size"
        " that job ran, and its gradient noise scale where recorded), and is judged on a seed of"
        " its own (`seeds[(j + k − 1) mod n]`). Policy: the posterior mean (flat prior on the"
        f" scale; tilt prior {'on' if p.tilt_prior else 'off'}, from the other models' (proxy,"
        " target) pairs when ≥ 6; noise-scale shape"
        f" {'on' if p.noise_shape else 'off'}), and the exploration gate (α = {p.alpha:g},"
        f" {p.expected_recurrences} expected recurrences, pessimistic bound mean + {p.z:g} sd)."
        " 'Job 1's plan': the same first plan judged on job k's seed; gain: job 1's plan −"
        " learned, paired per job. docs/planner.md explains the model and the gate.",
        "",
        "| headline key | value | goal | |",
        "|---|---|---|---|",
        _row(goals, "`edgetrain_over_oracle` (first plan, default estimate)",
             fmt_ci(h.edgetrain_over_oracle), "≤ 1.035",
             "edgetrain_over_oracle ≤ 1.035 (default estimate)"),
        _row(goals, "`recurring_gain` (jobs 2–5 pooled)",
             fmt_ci(_stat(gain.mean, gain.ci95, gain.n), 4), "95 % CI lower bound ≥ −0.005",
             "recurring_gain: 95 % CI lower bound ≥ −0.5 %"),
        _row(goals, "`recurring_gain` per job k (synthetic)",
             ", ".join(f"{k.k}: {k.mean:+.4f}" for k in gain.per_k[:6] if k.mean is not None)
             + " …", "every mean ≥ −0.005",
             "recurring_gain: every per-k mean (synthetic) ≥ −0.5 %"),
        _row(goals, "`recurring_over_oracle` (jobs 2–5 pooled)",
             fmt_ci(_stat(over.mean, over.ci95, over.n)), "≤ floor + 0.01",
             "recurring_over_oracle ≤ floor + 1 %"),
        _row(goals, "gap to the floor captured",
             f"{_pct(over.gap_captured)} (reference: single-seed plan {fmt_ci(over.reference)})",
             "≥ 50 %", "recurring_over_oracle captures ≥ 50 % of the gap"),
    ]  # fmt: skip
    if floor is not None:
        lines.append(f"| `floor_over_oracle` | {fmt_ci(_stat(floor.mean, floor.ci95, floor.n))}"
                     f" | — | {floor.how} |")  # fmt: skip
    if cost is not None:
        per = "; ".join(f"{w} {s / 60:.1f} min" for w, s in cost.server_s.items())
        lines += ["", f"The default estimate ({cost.proxy_seeds} proxy seeds) costs the server"
                  f" {cost.total_s / 60:.1f} min of one CPU thread over the three models ({per}):"
                  f" {cost.how}."]  # fmt: skip
    lines += _per_k_lines(result) + _policy_lines(result) + _synthetic_lines(result)
    lines += _noise_lines(result)
    lines += _by_model_lines(result)
    return lines


def _row(goals: dict[str, bool], key: str, value: str, goal: str, name: str) -> str:
    return f"| {key} | {value} | {goal} | {MET[goals.get(name, False)]} |"


def _stat(mean: float | None, ci95: tuple[float, float] | None, n: int) -> Stat:
    return Stat(mean=mean, std=None, n=n, ci95=ci95)


def _per_k_lines(result: PaperBenchSummary) -> list[str]:
    h = result.headline
    assert h is not None and h.recurring_over_oracle is not None
    per_k = h.recurring_over_oracle.per_k
    lines = [
        "",
        "Per job k on the real seeds (the default policy):",
        "",
        "| job k | edgetrain/oracle [95 % CI] | job 1's plan | gain | cumulative regret |"
        " explored |",
        "|---|---|---|---|---|---|",
    ]
    for s in per_k:
        stat = Stat(mean=s.mean, std=s.std, n=s.n, missing=s.missing, ci95=s.ci95)
        explored = sum(1 for j in result.recurring if j.k == s.k and j.explored)
        regret = "—" if s.cumulative_regret is None else f"{s.cumulative_regret:.3f}"
        lines.append(
            f"| {s.k} | {fmt_ci(stat)} | {fmt_ci(s.static) if s.static else '—'} |"
            f" {fmt_ci(s.gain, 4) if s.gain else '—'} | {regret} | {explored} |"
        )
    return lines


def _policy_lines(result: PaperBenchSummary) -> list[str]:
    h = result.headline
    assert h is not None
    if not h.recurring_policies:
        return []
    lines = [
        "",
        "Policies replayed on the same recorded N(b), profiles and judging (each one change from"
        " the default; 'moved': jobs 2–5 whose outcome differs from job 1's plan's):",
        "",
        "| policy | proxy seeds | job 1 | jobs 2–5 | gain over job 1's plan [95 % CI] |"
        " explored | moved |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in h.recurring_policies:
        lines.append(
            f"| {p.name} | {p.proxy_seeds} | {fmt_ci(p.first)} | {fmt_ci(p.later)} |"
            f" {fmt_ci(p.gain, 4)} | {p.explored} | {p.moved} of {p.jobs} |"
        )
    return lines


def _synthetic_lines(result: PaperBenchSummary) -> list[str]:
    h = result.headline
    assert h is not None
    s = h.synthetic
    if s is None or not s.policies:
        return []
    ks = [k for k in (1, 2, 3, 5, 10, s.horizon) if k <= s.horizon]
    ks = sorted(set(ks))
    lines = [
        "",
        f"Synthetic harness ({s.sequences} sequences of {s.horizon} jobs, {s.wall_s:.0f} s):"
        f" {s.how}. Edgetrain/oracle per job k [95 % CI over the {s.seeds} synthetic seeds];"
        " regret: Σ over the horizon of (TTA/oracle − 1), mean sequence, beside job 1's plan"
        " repeated.",
        "",
        "| policy | " + " | ".join(f"k = {k}" for k in ks) + " | gain jobs 2–5 | regret"
        " (job 1's plan) | explored |",
        "|---|" + "---|" * len(ks) + "---|---|---|",
    ]
    for p in s.policies:
        by_k = {k.k: k for k in p.per_k}
        lines.append(
            f"| {p.name} | " + " | ".join(_k(by_k.get(k)) for k in ks)
            + f" | {fmt_ci(p.gain_2_5, 4)} | {p.regret:.3f} ({p.static_regret:.3f}) |"
            f" {p.explored} |"
        )
    if s.quantisation_cost is not None:
        cost = fmt_ci(s.quantisation_cost, 4)
        lines += ["", "Reading the proxy's N at the evaluation grid instead of where the curve"
                  f" crossed the target costs job 1's plan (proxy r alone) {cost} in TTA/oracle"
                  " (synthetic, paired)."]  # fmt: skip
    return lines


def _noise_lines(result: PaperBenchSummary) -> list[str]:
    h = result.headline
    assert h is not None
    if not h.noise_fits:
        return []
    lines = [
        "",
        "The gradient noise scale against N(b): McCandlish et al.'s `N(b) = E_min (1 + b/B)`"
        " fitted to each set's geometric mean N(b) over seeds (sizes every seed reached), beside"
        " B_simple measured in its runs (geometric mean over the runs that recorded it);"
        " residual: log N − fit per batch size (> 0: more samples than the model allows).",
        "",
        "| model | data set | B_simple measured (runs) | B fitted | E_min fitted | rms log"
        " residual | residual per b |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in h.noise_fits:
        measured = "—" if f.measured_b_noise is None else f"{f.measured_b_noise:.1f}"
        res = ", ".join(f"{r:+.2f}" for r in f.residuals)
        lines.append(f"| {f.model} | {f.dataset} | {measured} ({f.measured_runs}) |"
                     f" {f.fitted_b_noise:.1f} | {f.fitted_e_min:.0f} |"
                     f" {f.rms_log_residual:.3f} | {res} |")  # fmt: skip
    return lines


def _by_model_lines(result: PaperBenchSummary) -> list[str]:
    h = result.headline
    assert h is not None and h.recurring_over_oracle is not None
    per_k = h.recurring_over_oracle.per_k
    workloads = sorted({j.workload for j in result.recurring})
    if not workloads:
        return []
    lines = [
        "",
        "By model (mean edgetrain/oracle over its cells, per job k):",
        "",
        "| model | " + " | ".join(f"k = {s.k}" for s in per_k) + " |",
        "|---|" + "---|" * len(per_k),
    ]
    for wl in workloads:
        cells = []
        for s in per_k:
            vals = [j.over_oracle for j in result.recurring
                    if j.workload == wl and j.k == s.k and j.over_oracle is not None]  # fmt: skip
            cells.append(f"{statistics.fmean(vals):.3f}" if vals else "—")
        lines.append(f"| {wl} | " + " | ".join(cells) + " |")
    return lines
