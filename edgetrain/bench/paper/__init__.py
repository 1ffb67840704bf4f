"""`edgetrain bench paper`: the first paper's Tables 2–4 and Figure 5, real ML on a device twin.

Split by role: `config` (what runs), `estimates` (cached real training), `evaluate` (the twin,
the choices), `profiles` (full and predicted profiles), `headline` (pooled figures with
intervals), `arithmetic`, `results` (models), `render` (Markdown), `plot` (the figure).

Samples to accuracy `N(b)` come from real PyTorch training (cached per seed); time and power come
from the device twin, so every device figure here is simulated. The true time to accuracy of a
choice (b, f) is `T_s(b, f) × N_target(b)`; edgetrain chooses with the proxy's r and a noisy
frontier-profiled LUT, B1/B2 run at a fixed safe frequency, the oracle sees the true grid.
"""

from __future__ import annotations

import time

from edgetrain.bench.paper.config import BenchConfig, Scale, config_for
from edgetrain.bench.paper.estimates import estimate_all, estimate_key
from edgetrain.bench.paper.evaluate import evaluate_all, summaries_and_sensitivity
from edgetrain.bench.paper.headline import headline
from edgetrain.bench.paper.recurring import recurring_all
from edgetrain.bench.paper.render import render_markdown
from edgetrain.bench.paper.results import EstimateRecord, PaperBenchResult, PaperBenchSummary
from edgetrain.workloads.progress import Reporter

__all__ = [
    "BenchConfig",
    "PaperBenchResult",
    "PaperBenchSummary",
    "Scale",
    "compare",
    "config_for",
    "reevaluate",
    "render_markdown",
    "run_bench",
]


def run_bench(
    config: BenchConfig,
    reporter: Reporter | None = None,
    *,
    command: str = "",
    threads: int = 1,
    jobs: int = 1,
) -> PaperBenchResult:
    """Estimate (cached real training), then profile, plan and compare on the twin."""
    started = time.monotonic()
    estimates, ran, training_s = estimate_all(config, reporter, threads=threads, jobs=jobs)
    return compare(config, estimates, jobs=jobs).model_copy(
        update={
            "command": command,
            "wall_s": time.monotonic() - started,
            "training_wall_s": training_s,
            "estimates_run": ran,
            "estimates_cached": len(estimates) - ran,
        }
    )


def compare(
    config: BenchConfig, estimates: dict[str, EstimateRecord], *, jobs: int = 1
) -> PaperBenchResult:
    """Profile, plan and compare on the twin from estimates already made (counted as cached)."""
    cases, fits = evaluate_all(config, estimates, jobs=jobs)
    summaries, sensitivity = summaries_and_sensitivity(config, cases)
    recurring = recurring_all(config, estimates)
    return PaperBenchResult(
        config=config,
        command="",
        date=time.strftime("%Y-%m-%d %H:%M %Z"),
        wall_s=0.0,
        training_wall_s=0.0,
        estimates_run=0,
        estimates_cached=len(estimates),
        estimates=list(estimates.values()),
        cases=cases,
        summaries=summaries,
        sensitivity=sensitivity,
        predictions=fits,
        headline=headline(config, cases, fits, recurring),
        recurring=recurring,
        seeds=list(config.seeds),
    )


def reevaluate(
    recorded: PaperBenchSummary, *, command: str = "", jobs: int = 1
) -> PaperBenchResult:
    """The comparison recomputed from a recorded run's estimates (no training), e.g. after a new
    column was added; the run's own fields (command, date, wall and training time, estimates
    trained) stay the recorded run's, and `reevaluated` says what was done."""
    config = recorded.config
    by_identity = {(e.model, e.dataset, e.seed): e for e in recorded.estimates}
    estimates: dict[str, EstimateRecord] = {}
    for w in config.workloads:
        for ref in w.datasets:
            for seed in config.seeds:
                record = by_identity.get((w.model, ref.name, seed))
                if record is None:
                    raise ValueError(
                        f"the recorded run has no estimate of {w.model} on {ref.name}, seed"
                        f" {seed}: it is not a run of this configuration; run the bench instead"
                    )
                estimates[estimate_key(w, ref, seed)] = record
    fresh = compare(config, estimates, jobs=jobs)
    return fresh.model_copy(
        update={
            "command": recorded.command,
            "date": recorded.date,
            "wall_s": recorded.wall_s,
            "training_wall_s": recorded.training_wall_s,
            "estimates_run": recorded.estimates_run,
            "estimates_cached": recorded.estimates_cached,
            "reevaluated": f"{fresh.date}: `{command}` (recorded estimates, no training)",
        }
    )
