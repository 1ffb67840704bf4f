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
from edgetrain.bench.paper.proxies import estimate_cost, noise_fits
from edgetrain.bench.paper.recurring import policy_stats, recurring_all
from edgetrain.bench.paper.render import render_markdown
from edgetrain.bench.paper.results import EstimateRecord, PaperBenchResult, PaperBenchSummary
from edgetrain.bench.paper.synthetic import synthetic
from edgetrain.workloads.progress import Reporter

__all__ = [
    "BenchConfig",
    "PaperBenchResult",
    "PaperBenchSummary",
    "Scale",
    "compare",
    "config_for",
    "read_recorded",
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
    synthetic_seeds: int | None = None,
) -> PaperBenchResult:
    """Estimate (cached real training), then profile, plan and compare on the twin."""
    started = time.monotonic()
    estimates, ran, training_s = estimate_all(config, reporter, threads=threads, jobs=jobs)
    return compare(config, estimates, jobs=jobs, synthetic_seeds=synthetic_seeds).model_copy(
        update={
            "command": command,
            "wall_s": time.monotonic() - started,
            "training_wall_s": training_s,
            "estimates_run": ran,
            "estimates_cached": len(estimates) - ran,
        }
    )


#: The comparison policies the synthetic harness runs beside the default (each costs seconds).
SYNTHETIC_ROWS = (
    "issue 30: lcb κ = 0.5, proper scale prior",
    "no learning (the proxy's plan)",
    "posterior mean, flat scale, no gate",
    "default with a looser gate (α = 10 %, 20 recurrences)",
)


def compare(
    config: BenchConfig,
    estimates: dict[str, EstimateRecord],
    *,
    jobs: int = 1,
    synthetic_seeds: int | None = None,
) -> PaperBenchResult:
    """Profile, plan and compare on the twin from estimates already made (counted as cached);
    `synthetic_seeds`: the harness's size (None: the configured; 0: skip it)."""
    cases, fits = evaluate_all(config, estimates, jobs=jobs)
    summaries, sensitivity = summaries_and_sensitivity(config, cases)
    recurring = recurring_all(config, estimates)
    policies = policy_stats(config, estimates)
    synth = None
    if synthetic_seeds is None or synthetic_seeds > 0:
        default = config.recurring.policy
        compared = [default, *(p for p in config.recurring.policies if p.name in SYNTHETIC_ROWS)]
        synth = synthetic(config, estimates, compared, seeds=synthetic_seeds)
    cost = estimate_cost(config, estimates, config.recurring.policy.proxy_seeds)
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
        headline=headline(config, cases, fits, recurring, policies=policies, synth=synth,
                          estimate=cost).model_copy(
            update={"noise_fits": noise_fits(config, estimates)}),
        recurring=recurring,
        seeds=list(config.seeds),
    )


def read_recorded(text: str) -> PaperBenchSummary:
    """A recorded results JSON for `reevaluate`: what it computed from its estimates (headline,
    recurring jobs) is dropped, since the re-evaluation recomputes it and its shape may be an
    older one."""
    import json

    data = json.loads(text)
    for derived in ("headline", "recurring"):
        data.pop(derived, None)
    return PaperBenchSummary.model_validate(data)


def reevaluate(
    recorded: PaperBenchSummary,
    *,
    command: str = "",
    jobs: int = 1,
    synthetic_seeds: int | None = None,
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
    fresh = compare(config, estimates, jobs=jobs, synthetic_seeds=synthetic_seeds)
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
