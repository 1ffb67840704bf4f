"""The benchmark's figure: time to accuracy over the oracle's, per board and limit (simulated)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from edgetrain.bench.paper.arithmetic import Stat
from edgetrain.bench.paper.headline import per_seed
from edgetrain.bench.paper.results import CaseOutcome, ChoiceOutcome, PaperBenchResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: Methods in the figure, by their field on CaseOutcome.
METHODS: tuple[tuple[str, str], ...] = (
    ("b1", "B1"),
    ("b2", "B2"),
    ("edgetrain", "edgetrain (frontier)"),
    ("full", "edgetrain (full grid)"),
    ("predicted", "edgetrain (predicted)"),
)


def _over_oracle(c: CaseOutcome, *, name: str) -> float | None:
    choice: ChoiceOutcome | None = getattr(c, name)
    if choice is None or choice.tta_s is None or c.oracle is None or not c.oracle.tta_s:
        return None
    return choice.tta_s / c.oracle.tta_s


def write_plot(result: PaperBenchResult, path: Path) -> None:
    """One panel per board: each method's TTA / oracle TTA per limit, mean and 95 % interval over
    seeds of the per-seed mean over the main-table cells."""
    import matplotlib

    matplotlib.use("Agg")  # no display here, and none needed
    import matplotlib.pyplot as plt

    from edgetrain.bench.paper.headline import main_cases
    from edgetrain.bench.paper.render_tables import fmt_limit

    cfg = result.config
    main = main_cases(cfg, result.cases)
    over = result.headline.recurring_over_oracle if result.headline else None
    per_k = over.per_k if over is not None else []
    panels = len(cfg.boards) + (1 if per_k else 0)
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.6), squeeze=False)
    axes_list = list(axes[0][: len(cfg.boards)])
    for ax in axes_list[1:]:
        ax.sharey(axes_list[0])
    width = 0.8 / len(METHODS)
    for ax, board in zip(axes_list, cfg.boards, strict=True):
        limits = board.power_limits_w
        for m, (name, label) in enumerate(METHODS):
            means, errors = [], []
            for limit in limits:
                cases = [c for c in main if c.board == board.board and c.power_limit_w == limit]
                stat = per_seed(cases, functools.partial(_over_oracle, name=name))
                mean = stat.mean if stat.mean is not None else float("nan")
                half = (stat.ci95[1] - mean) if stat.ci95 is not None else 0.0
                means.append(mean)
                errors.append(half)
            xs = [i + (m - (len(METHODS) - 1) / 2) * width for i in range(len(limits))]
            ax.bar(xs, means, width, yerr=errors, capsize=2, label=label)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(limits)), [fmt_limit(w) for w in limits])
        ax.set_title(f"{board.board} (twin)")
        ax.set_xlabel("power limit")
    axes_list[0].set_ylabel("time to accuracy / oracle's")
    if per_k:
        _recurring_panel(axes[0][-1], result)
    handles, labels = axes_list[0].get_legend_handles_labels()
    # Below the panels: inside one, the legend hides the bars of its tallest limit.
    fig.legend(handles, labels, loc="lower center", ncol=len(METHODS), fontsize=7, frameon=False)
    fig.suptitle(
        f"bench paper --scale {cfg.scale}: mean and 95 % interval over {len(result.seeds)} seeds"
        " (simulated device)",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _recurring_panel(ax: Axes, result: PaperBenchResult) -> None:
    """edgetrain/oracle per job k of the recurring sequences, with and without learning."""
    assert result.headline is not None and result.headline.recurring_over_oracle is not None
    over = result.headline.recurring_over_oracle
    per_k = over.per_k
    ks = [s.k for s in per_k]

    def series(stats: list[Stat | None]) -> tuple[list[float], list[float]]:
        means = [s.mean if s and s.mean is not None else float("nan") for s in stats]
        halves = [
            (s.ci95[1] - s.mean) if s and s.ci95 and s.mean is not None else 0.0 for s in stats
        ]
        return means, halves

    learned: list[Stat | None] = [Stat(mean=s.mean, std=s.std, n=s.n, ci95=s.ci95) for s in per_k]
    static: list[Stat | None] = [s.static for s in per_k]
    for offset, (label, stats) in enumerate(
        (("learning (default policy)", learned), ("job 1's plan (no learning)", static))
    ):
        means, halves = series(stats)
        ax.errorbar(
            [k + 0.08 * offset for k in ks], means, yerr=halves, capsize=3, marker="o", label=label
        )
    floor = result.headline.floor_over_oracle
    if floor is not None and floor.mean is not None:
        ax.axhline(
            floor.mean,
            color="grey",
            linestyle="--",
            linewidth=0.8,
            label="floor: all other seeds' N(b)",
        )
    if over.reference.mean is not None:
        ax.axhline(over.reference.mean, color="tab:red", linestyle=":", linewidth=0.8,
                   label="single-seed proxy plan")  # fmt: skip
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(ks)
    ax.set_xlabel("job k of a recurring sequence")
    ax.set_title("recurring jobs, all cells (twin)")
    ax.legend(fontsize=7, frameon=False)
