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
from edgetrain.bench.paper.estimates import estimate_all
from edgetrain.bench.paper.evaluate import evaluate_all, summaries_and_sensitivity
from edgetrain.bench.paper.headline import headline
from edgetrain.bench.paper.render import render_markdown
from edgetrain.bench.paper.results import EstimateRecord, PaperBenchResult
from edgetrain.workloads.progress import Reporter

__all__ = [
    "BenchConfig",
    "PaperBenchResult",
    "Scale",
    "compare",
    "config_for",
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
        headline=headline(config, cases, fits),
        seeds=list(config.seeds),
    )
