"""The benchmark's results as models: per choice, per case, per summary, and the whole run."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.training import OptimizerSpec
from edgetrain.bench.paper.arithmetic import Stat
from edgetrain.bench.paper.config import CACHE_VERSION, BenchConfig
from edgetrain.bench.paper.profiles import PredictionFit


class ChoiceOutcome(BaseModel):
    """One method's (b, f) and what it truly costs on the target data (simulated device)."""

    batch_size: int
    gpu_freq_hz: int
    time_per_sample_s: float
    peak_power_w: float
    mean_power_w: float
    samples_to_accuracy: float | None
    tta_s: float | None = Field(description="T_s × N_target; None: the target was never reached")
    energy_j: float | None = Field(description="mean power × tta_s")
    within_limit: bool = Field(description="true (noise-free) power within the limit")
    simulated: Literal[True] = True


class CaseOutcome(BaseModel):
    """One (workload, proxy, target, board, limit, seed)."""

    workload: str
    proxy: str
    target: str
    board: str
    power_limit_w: float | None
    seed: int
    baseline_freq_hz: int | None
    baseline_freq_source: Literal["paper", "baseline_column"]
    b1: ChoiceOutcome | None
    b2: ChoiceOutcome | None
    edgetrain: ChoiceOutcome | None
    oracle: ChoiceOutcome | None
    frontier_points: int
    grid_points: int
    profiling_s: float = Field(description="device time of the frontier profile (simulated)")
    overhead_share: float | None = Field(description="profiling_s / edgetrain tta_s")
    full: ChoiceOutcome | None = Field(default=None, description="edgetrain on the full grid")
    full_profiling_s: float = 0.0
    full_overhead_share: float | None = None
    predicted: ChoiceOutcome | None = Field(
        default=None, description="edgetrain on a predicted profile (k measured + PowerTrain)"
    )
    predicted_points: int = Field(default=0, description="points measured for the prediction")
    predicted_profiling_s: float = 0.0
    predicted_overhead_share: float | None = None
    simulated: Literal[True] = True


class CaseSummary(BaseModel):
    """A main-table row: one case over seeds."""

    workload: str
    proxy: str
    target: str
    board: str
    power_limit_w: float | None
    baseline_freq_hz: int | None
    baseline_freq_source: str
    b1_tta_s: Stat
    b2_tta_s: Stat
    edgetrain_tta_s: Stat
    oracle_tta_s: Stat
    edgetrain_over_oracle: Stat
    b1_over_edgetrain: Stat
    b2_over_edgetrain: Stat
    b1_energy_j: Stat
    b2_energy_j: Stat
    edgetrain_energy_j: Stat
    oracle_energy_j: Stat
    overhead_share: Stat
    frontier_points: Stat
    grid_points: int
    b1_choices: list[str]
    b2_choices: list[str]
    edgetrain_choices: list[str]
    oracle_choices: list[str]
    edgetrain_over_limit: int = Field(description="seeds whose choice truly exceeds the limit")
    full_tta_s: Stat
    predicted_tta_s: Stat
    full_over_oracle: Stat
    predicted_over_oracle: Stat
    predicted_over_full: Stat = Field(description="TTA ratio; the penalty is (value − 1)")
    full_overhead_share: Stat
    predicted_overhead_share: Stat
    predicted_points: int
    full_choices: list[str]
    predicted_choices: list[str]
    predicted_over_limit: int = Field(description="seeds whose choice truly exceeds the limit")
    predicted_over_limit_1w: int = Field(description="seeds whose choice exceeds limit + 1 W")
    simulated: Literal[True] = True


class SensitivityCell(BaseModel):
    """Figure 5: edgetrain's TTA with this proxy's r over the oracle's, on this target."""

    workload: str
    board: str
    power_limit_w: float | None
    proxy: str
    target: str
    edgetrain_over_oracle: Stat
    simulated: Literal[True] = True


class EstimateRecord(BaseModel):
    """One cached real-training estimate: samples to the target per batch size, one seed."""

    model: str
    dataset: str
    dataset_limit: int | None
    target_accuracy: float
    batch_sizes: list[int]
    optimizer: OptimizerSpec
    sample_budget: int
    eval_interval_samples: int
    eval_samples: int | None
    seed: int
    samples_to_accuracy: list[float | None] = Field(
        description="at the first evaluation at the target (the evaluation grid)"
    )
    crossing_samples: list[float | None] | None = Field(
        default=None,
        description="where the accuracy curve crossed the target, interpolated between"
        " evaluations (None: recorded before it was measured)",
    )
    gradient_noise_scale: list[float | None] | None = Field(
        default=None, description="B_simple measured in each run (None: not measured)"
    )
    wall_s: float
    cache_version: int = CACHE_VERSION

    def samples(self, interpolated: bool = False) -> list[float | None]:
        """N per batch size: at the crossing when asked and recorded, else at the grid."""
        if interpolated and self.crossing_samples is not None:
            return self.crossing_samples
        return self.samples_to_accuracy

    def efficiency(self, interpolated: bool = False) -> EfficiencyVector | None:
        """The contract's efficiency vector (None when no batch size reached the target)."""
        samples = self.samples(interpolated)
        if all(s is None for s in samples):
            return None
        return EfficiencyVector.from_samples(
            model=self.model,
            dataset=self.dataset,
            target_accuracy=self.target_accuracy,
            batch_sizes=self.batch_sizes,
            samples_to_accuracy=samples,
        ).model_copy(update={"seeds": 1, "gradient_noise_scale": self.gradient_noise_scale})


class RecurringJob(BaseModel):
    """Job k of one sequence: what it chose, what it observed, how it did (simulated device)."""

    workload: str
    target: str
    board: str
    power_limit_w: float | None
    sequence: int = Field(description="the seed of the caches (proxy r, profile) it plans from")
    k: int
    seed: int = Field(description="the seed it is judged on (its own training)")
    batch_size: int | None
    gpu_freq_hz: int | None
    observed_samples: float | None = Field(description="N at its batch size; None: missed")
    over_oracle: float | None
    static_over_oracle: float | None = Field(description="job 1's plan judged on this seed")
    informed_over_oracle: float | None = Field(
        description="planned with every other seed's whole N_target(b) (leave-one-out mean)"
    )
    single_seed_over_oracle: float | None = Field(
        default=None, description="the single-seed proxy's plan (issue 30's job 1) on this seed"
    )
    explored: bool = Field(default=False, description="the gate sent it off the incumbent")
    simulated: bool = True


class RecurringStat(BaseModel):
    """edgetrain/oracle at job k over the judged seeds (per-seed mean over the cells)."""

    k: int
    mean: float | None
    ci95: tuple[float, float] | None
    std: float | None = None
    n: int = 0
    missing: int = 0
    static: Stat | None = Field(default=None, description="without learning: job 1's plan")
    gain: Stat | None = Field(
        default=None, description="static − learned, paired per job (> 0: learning helped)"
    )
    cumulative_regret: float | None = Field(
        default=None, description="Σ over jobs 1 … k of (TTA / oracle TTA − 1), mean over cells"
    )


class KStat(BaseModel):
    """A figure at job k of a sequence."""

    k: int
    mean: float | None
    ci95: tuple[float, float] | None
    n: int = 0


class PolicyStat(BaseModel):
    """One recurring policy replayed on the recorded N(b) (the same profiles and judging)."""

    name: str
    proxy_seeds: int
    first: Stat = Field(description="edgetrain/oracle at job 1")
    later: Stat = Field(description="edgetrain/oracle over jobs 2–5, pooled")
    gain: Stat = Field(description="job 1's plan − this, over jobs 2–5 (> 0: learning helped)")
    explored: int = Field(description="jobs the gate sent off the incumbent")
    moved: int = Field(description="jobs 2–5 whose outcome differs from job 1's plan's")
    jobs: int


class EstimateCost(BaseModel):
    """What the default estimate costs the server (real training on this CPU, one thread)."""

    proxy_seeds: int
    server_s: dict[str, float] = Field(description="per workload: seeds × one seed's runs")
    total_s: float
    how: str


class SyntheticPolicy(BaseModel):
    """One policy over the synthetic seeds: per job k and over the long horizon."""

    name: str
    per_k: list[KStat] = Field(description="edgetrain/oracle per job k")
    gain_per_k: list[KStat] = Field(description="job 1's plan − this, per job k")
    gain_2_5: Stat = Field(description="gain over jobs 2–5 pooled, per synthetic seed")
    later: Stat = Field(description="edgetrain/oracle over jobs 2 … horizon pooled")
    regret: float = Field(description="Σ over the horizon of (TTA/oracle − 1), mean sequence")
    static_regret: float = Field(description="the same for job 1's plan repeated")
    explored: int


class SyntheticSummary(BaseModel):
    """The synthetic-seed harness (issue 41): policies judged on seeds drawn from a fit."""

    seeds: int
    horizon: int
    sequences: int
    wall_s: float
    quantisation_cost: Stat | None = Field(
        default=None,
        description="job 1's plan (proxy r alone) with N read at the evaluation grid minus read"
        " where the curve crossed, TTA/oracle, paired per synthetic seed",
    )
    policies: list[SyntheticPolicy]
    how: str


class NoiseFit(BaseModel):
    """McCandlish et al.'s `N(b) = E_min (1 + b/B)` fitted to one (model, data set)'s mean N(b),
    beside the noise scale measured in its runs."""

    model: str
    dataset: str
    measured_b_noise: float | None = Field(description="B_simple, geometric mean over runs")
    measured_runs: int
    fitted_b_noise: float
    fitted_e_min: float
    rms_log_residual: float
    residuals: list[float] = Field(description="log N − fit per batch size (> 0: slower)")


class RecurringGain(BaseModel):
    """`recurring_gain` (issue 41): job 1's plan − the learned plan, jobs 2–5, seed as the unit."""

    mean: float | None
    ci95: tuple[float, float] | None
    n: int
    per_k: list[KStat] = Field(description="per job k, from the synthetic harness")
    per_k_real: list[KStat] = Field(description="per job k, on the real seeds")
    how: str


class RecurringOverOracle(BaseModel):
    """`recurring_over_oracle` (issue 41): jobs 2–5 pooled, per k, and the gap it closes."""

    mean: float | None
    ci95: tuple[float, float] | None
    n: int
    per_k: list[RecurringStat]
    reference: Stat = Field(description="the single-seed proxy's plan on the same jobs")
    gap_captured: float | None = Field(
        description="(reference − pooled) / (reference − floor): the share of the gap between"
        " the single-seed plan and the floor that the default closes"
    )
    how: str


class FloorOverOracle(BaseModel):
    """`floor_over_oracle`: what unlimited history could at best know."""

    mean: float | None
    ci95: tuple[float, float] | None
    n: int
    how: str


class BoardRatios(BaseModel):
    """One board (and model, or all models) at one limit: ratios pooled over its targets."""

    board: str
    workload: str | None = Field(description="None: every model of the board")
    power_limit_w: float | None
    b1_over_edgetrain: Stat
    b2_over_edgetrain: Stat
    edgetrain_over_oracle: Stat
    simulated: Literal[True] = True


class Headline(BaseModel):
    """What a reader checks first; every Stat is over seeds of the per-seed mean over the pooled
    main-table cells, with a 95 % Student-t interval."""

    cells: int = Field(description="main-table cells (model × target × board × limit)")
    edgetrain_over_oracle: Stat
    full_over_oracle: Stat
    predicted_over_oracle: Stat
    low_limit: list[BoardRatios] = Field(description="each board's lowest limit")
    overhead_pct: dict[str, Stat] = Field(description="frontier, full, predicted")
    overhead_cell_range_pct: dict[str, tuple[float, float]] = Field(
        description="smallest and largest cell mean, per profile"
    )
    time_mape_pct: Stat = Field(description="over predicted profiles (model × board × seed)")
    time_mape_max_pct: float
    peak_power_mape_pct: Stat
    peak_power_mape_max_pct: float
    penalty_pct: Stat = Field(description="predicted vs full TTA, (ratio − 1) × 100")
    penalty_cases: int
    penalty_cases_over_1pct: int
    penalty_max_pct: float
    limited_cases: int
    predicted_over_limit_1w: int
    edgetrain_over_limit_1w: int
    goals: dict[str, bool]
    edgetrain_estimate: EstimateCost | None = Field(
        default=None, description="the default estimate edgetrain_over_oracle plans from"
    )
    recurring_gain: RecurringGain | None = None
    recurring_over_oracle: RecurringOverOracle | None = None
    floor_over_oracle: FloorOverOracle | None = None
    recurring_policies: list[PolicyStat] = Field(
        default_factory=list, description="the comparison policies on the same data"
    )
    synthetic: SyntheticSummary | None = None
    noise_fits: list[NoiseFit] = Field(
        default_factory=list, description="the empirical model against each set's N(b)"
    )
    simulated: Literal[True] = True


class PaperBenchSummary(BaseModel):
    """The committed JSON beside the table: everything but the per-case outcomes."""

    config: BenchConfig
    command: str
    date: str
    wall_s: float
    training_wall_s: float = Field(description="real training this run (cached runs excluded)")
    estimates_run: int
    estimates_cached: int
    seeds: list[int]
    estimates: list[EstimateRecord] = Field(description="samples to target per estimate")
    summaries: list[CaseSummary]
    sensitivity: list[SensitivityCell]
    predictions: list[PredictionFit] = Field(default_factory=list)
    headline: Headline | None = None
    recurring: list[RecurringJob] = Field(
        default_factory=list, description="every job of every recurring sequence"
    )
    reevaluated: str | None = Field(
        default=None,
        description="when and how the comparison was recomputed from the recorded estimates"
        " (no training); the run fields above are the recorded run's",
    )
    simulated: Literal[True] = True


class PaperBenchResult(PaperBenchSummary):
    """What `bench paper --json` prints; the markdown table is rendered from it."""

    cases: list[CaseOutcome]

    def summary(self) -> PaperBenchSummary:
        """The result without the per-case outcomes (megabytes at the cpu scale)."""
        return PaperBenchSummary.model_validate(self.model_dump(exclude={"cases"}))
