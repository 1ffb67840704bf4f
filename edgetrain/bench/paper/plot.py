"""The benchmark's figure: time to accuracy over the oracle's, per board and limit (simulated)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from edgetrain.bench.paper.arithmetic import Stat
from edgetrain.bench.paper.headline import per_seed
from edgetrain.bench.paper.results import (
    CaseOutcome,
    ChoiceOutcome,
    PaperBenchResult,
    PaperBenchSummary,
)

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


def write_posterior_plot(result: PaperBenchSummary, path: Path) -> None:
    """docs/planner.md's figure: per model, N(b) of the proxy (the default estimate), the first
    plan's posterior (after job 1's observation, ± 1 sd relative to it) and the target's seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from edgetrain.bench.paper.estimates import estimate_key
    from edgetrain.bench.paper.proxies import case_proxy, population_for, run_pairs
    from edgetrain.planner.history import posterior
    from edgetrain.planner.learn import noise_shape

    cfg = result.config
    by_identity = {(e.model, e.dataset, e.seed): e for e in result.estimates}
    estimates = {estimate_key(w, ref, s): by_identity[(w.model, ref.name, s)]
                 for w in cfg.workloads for ref in w.datasets for s in cfg.seeds}  # fmt: skip
    policy = cfg.recurring.policy
    own = run_pairs(cfg, estimates)
    first = cfg.seeds[0]
    fig, axes = plt.subplots(1, len(cfg.workloads), figsize=(4.4 * len(cfg.workloads), 3.8),
                             squeeze=False)  # fmt: skip
    for ax, w in zip(axes[0], cfg.workloads, strict=True):
        target = w.targets[0]
        proxy = case_proxy(cfg, w, w.proxy, first, estimates, policy)
        sizes = [b for b, n in zip(w.batch_sizes, proxy.samples(cfg.interpolated), strict=True)
                 if n]  # fmt: skip
        proxy_n = [n for n in proxy.samples(cfg.interpolated) if n]
        tilt = population_for(cfg, w, own, policy)
        seed_runs = [estimates[estimate_key(w, w.dataset(target), s)] for s in cfg.seeds]
        for s, run in zip(cfg.seeds, seed_runs, strict=True):
            xs = [b for b, n in zip(run.batch_sizes, run.samples(cfg.interpolated), strict=True)
                  if n]  # fmt: skip
            ys = [n for n in run.samples(cfg.interpolated) if n]
            ax.plot(xs, ys, "-", color="tab:green", alpha=0.3, linewidth=0.8,
                    label="target, each seed" if s == first else None)  # fmt: skip
        # Job 1's observation: its own seed's N at the size the first plan picks (here the
        # proxy's best N, the plan's choice without a profile), and its noise scale.
        post0 = posterior(sizes, proxy_n, [], policy.hyper(tilt))
        b1 = sizes[int(np.argmin(post0.samples()))]
        run = seed_runs[0]
        n1 = run.samples(cfg.interpolated)[run.batch_sizes.index(b1)]
        scales = proxy.gradient_noise_scale
        shape = None
        if policy.noise_shape and scales is not None and run.gradient_noise_scale is not None:
            by_size = dict(zip(w.batch_sizes, scales, strict=True))
            got = noise_shape(sizes, [by_size[b] for b in sizes],
                              [(b1, run.gradient_noise_scale[run.batch_sizes.index(b1)])])
            shape = None if got.shape is None else got.shape.tolist()
        post = posterior(sizes, proxy_n, [(b1, n1)] if n1 else [], policy.hyper(tilt), shape)
        median, sd = post.samples(), post.relative_log_sd()
        scale = float(median[sizes.index(b1)] / proxy_n[sizes.index(b1)])
        ax.plot(sizes, [n * scale for n in proxy_n], "s--", color="tab:gray", zorder=3,
                markerfacecolor="none", label=f"proxy ({policy.proxy_seeds} seeds), at the"
                " target's scale")  # fmt: skip
        ax.plot(sizes, median, "o-", color="tab:blue", label="posterior after job 1")
        ax.fill_between(sizes, median * np.exp(-sd), median * np.exp(sd), color="tab:blue",
                        alpha=0.15, label="± 1 sd relative to b observed")
        if n1:
            ax.plot([b1], [n1], "kx", markersize=9, label="job 1's observation")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(w.batch_sizes, [str(b) for b in w.batch_sizes])
        ax.set_xlabel("batch size b")
        ax.set_title(f"{w.model}: {w.proxy} → {target}", fontsize=9)
        trusted = f"tilt prior {tilt.mean:+.3f}/doubling" if tilt.trusted else "no tilt prior"
        ax.text(0.02, 0.02, trusted + (", noise shape" if shape else ""),
                transform=ax.transAxes, fontsize=7)  # fmt: skip
    axes[0][0].set_ylabel("samples to target N(b)")
    axes[0][0].legend(fontsize=6, frameon=False)
    fig.suptitle(f"bench paper --scale {cfg.scale}: N(b) of proxy, posterior and target"
                 " (real training)", fontsize=9)  # fmt: skip
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
