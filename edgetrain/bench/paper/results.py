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
    samples_to_accuracy: list[float | None]
    wall_s: float
    cache_version: int = CACHE_VERSION

    def efficiency(self) -> EfficiencyVector | None:
        """The contract's efficiency vector (None when no batch size reached the target)."""
        if all(s is None for s in self.samples_to_accuracy):
            return None
        return EfficiencyVector.from_samples(
            model=self.model,
            dataset=self.dataset,
            target_accuracy=self.target_accuracy,
            batch_sizes=self.batch_sizes,
            samples_to_accuracy=self.samples_to_accuracy,
        )


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
    recurring_over_oracle: list[RecurringStat] = Field(
        default_factory=list, description="the recurring column: edgetrain/oracle per job k"
    )
    recurring_informed: Stat | None = Field(
        default=None, description="the floor: planned from every other seed's whole N_target(b)"
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
