"""What the paper benchmark runs: scales, workloads, data sets, boards, power limits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from edgetrain.api.enums import StrEnum
from edgetrain.api.job import DEFAULT_ESTIMATE_SEEDS
from edgetrain.api.plan import PowerMetric
from edgetrain.api.training import OptimizerName, OptimizerSpec
from edgetrain.planner.gate import GateSettings
from edgetrain.planner.history import Chooser, HistoryPrior
from edgetrain.planner.tilt import TiltPrior
from edgetrain.workloads import workload_cost

MHZ = 1_000_000


#: Bump when what a cached estimate means changes, so stale entries are ignored.
CACHE_VERSION = 1


#: The paper's fixed baseline frequencies on the Jetson Nano (§5.1): 4.5 W, 7 W and no limit.
NANO_PAPER_BASELINE_HZ: dict[float | None, int] = {
    4.5: 307_200_000,
    7.0: 614_400_000,
    None: 921_600_000,
}


NANO_PAPER_LIMITS_W = (4.5, 7.0)


#: The workload whose twin power range scales the Nano's limits to other boards.
LIMIT_REFERENCE_MODEL = ("resnet18", (3, 32, 32), 10)


class Scale(StrEnum):
    """How big a benchmark to run."""

    small = "small"
    cpu = "cpu"
    paper = "paper"


class DatasetRef(BaseModel):
    """A data set with the subset size and the target accuracy used for it."""

    model_config = ConfigDict(frozen=True)

    name: str
    limit: Annotated[int, Field(gt=0)] | None = None
    target_accuracy: Annotated[float, Field(gt=0, le=1)]


class WorkloadConfig(BaseModel):
    """One model row group: the data sets it trains on and what the twin times."""

    model_config = ConfigDict(frozen=True)

    label: str
    model: str = Field(description="trained for real to measure samples to accuracy")
    twin_model: str | None = Field(
        default=None, description="timed on the twin instead of `model` (None: `model` itself)"
    )
    twin_input_shape: tuple[int, ...] | None = None
    twin_num_classes: int | None = None
    datasets: list[DatasetRef] = Field(min_length=1, description="same input shape; all pairs")
    proxy: str
    targets: list[str] = Field(min_length=1)
    batch_sizes: list[Annotated[int, Field(gt=0)]] = Field(min_length=1)
    optimizer: OptimizerSpec = OptimizerSpec()
    sample_budget: Annotated[int, Field(gt=0)]
    eval_interval_samples: Annotated[int, Field(gt=0)] = 256
    eval_samples: Annotated[int, Field(gt=0)] | None = None

    def dataset(self, name: str) -> DatasetRef:
        """The data set entry by name."""
        for ref in self.datasets:
            if ref.name == name:
                return ref
        raise KeyError(f"{self.label}: no data set {name!r}")


class BoardConfig(BaseModel):
    """A twin board and its power limits (None: no limit)."""

    model_config = ConfigDict(frozen=True)

    board: str
    power_limits_w: list[float | None] = Field(min_length=1)


class ProfilingCost(BaseModel):
    """How a frontier profile is simulated and what one measured point costs on the device."""

    model_config = ConfigDict(frozen=True)

    minibatches: Annotated[int, Field(ge=2)] = 40  # ProfileSpec's default m
    min_window_s: Annotated[float, Field(ge=0)] = 1.0  # ProfileSpec.min_window_s
    # ~3 power-settling constants of the twin (0.8 s); PowerTrain sees power settle in 2–3 s.
    stabilise_s: Annotated[float, Field(ge=0)] = 2.5
    time_noise: Annotated[float, Field(ge=0)] = 0.02  # relative std of a measured time
    power_noise: Annotated[float, Field(ge=0)] = 0.02  # relative std of a measured power


class PredictedProfiling(BaseModel):
    """The `profiling: predicted` strategy as the bench runs it (PowerTrain transfer)."""

    model_config = ConfigDict(frozen=True)

    points: Annotated[int, Field(ge=2)] = 20  # the job's strategy.predictPoints default
    margin_quantile: Annotated[float, Field(gt=0, le=1)] = 0.9  # ProfileSpec's default
    epochs: Annotated[int, Field(ge=1)] = 100  # ProfileSpec.predict_epochs


#: Seeds the estimate merges by default (`budget.seeds` of a job); the bench's trade-off table
#: (`proxy_seeds` per policy) is what chose it.
DEFAULT_PROXY_SEEDS = len(DEFAULT_ESTIMATE_SEEDS)


class Policy(BaseModel):
    """How a sequence of recurring jobs plans: its estimate, its model and its chooser."""

    model_config = ConfigDict(frozen=True)

    name: str = "default"
    proxy_seeds: int = Field(default=DEFAULT_PROXY_SEEDS, ge=1)
    learn: bool = Field(default=True, description="plan from the posterior (else the proxy's)")
    chooser: Chooser = Chooser.mean
    kappa: float = Field(default=0.5, ge=0, description="lcb's width")
    gate: bool = Field(default=True, description="the exploration gate (with the mean)")
    expected_recurrences: int = Field(default=10, ge=1)
    alpha: float = Field(default=0.01, ge=0)
    z: float = Field(default=1.645, ge=0)
    scale_sd: float | None = Field(default=None, description="None: flat")
    slope_sd: float = 0.2
    size_sd: float = 0.15
    noise_sd: float = 0.12
    shape_sd: float = 0.5
    tilt_prior: bool = Field(default=True, description="the population tilt prior (if trusted)")
    noise_shape: bool = Field(default=True, description="the noise scales' shape (if measured)")

    def hyper(self, tilt: TiltPrior | None) -> HistoryPrior:
        """The posterior's prior, the population tilt applied where trusted and wanted."""
        use = tilt is not None and tilt.trusted and self.tilt_prior
        return HistoryPrior(
            scale_sd=self.scale_sd,
            slope_mean=tilt.mean if use and tilt is not None else 0.0,
            slope_sd=tilt.sd if use and tilt is not None else self.slope_sd,
            size_sd=self.size_sd,
            noise_sd=self.noise_sd,
            shape_sd=self.shape_sd,
        )

    def gate_settings(self) -> GateSettings:
        """The gate this policy runs."""
        return GateSettings(self.expected_recurrences, self.alpha, self.z)


def comparison_policies() -> list[Policy]:
    """The policies the bench replays beside the default, each one change away from it."""
    one = {"proxy_seeds": 1, "tilt_prior": False, "noise_shape": False}
    return [
        Policy(name="issue 30: lcb κ = 0.5, proper scale prior", chooser=Chooser.lcb,
               gate=False, scale_sd=1.0, **one),
        Policy(name="no learning (the proxy's plan)", learn=False, **one),
        Policy(name="posterior mean, flat scale, no gate", gate=False, **one),
        Policy(name="posterior mean + gate", **one),
        *(Policy(name=f"posterior mean + gate, {s} proxy seeds", proxy_seeds=s,
                 tilt_prior=False, noise_shape=False) for s in (2, 3, 4)),
        Policy(name="default without the tilt prior", tilt_prior=False),
        Policy(name="default with a looser gate (α = 10 %, 20 recurrences)", alpha=0.1,
               expected_recurrences=20),
        Policy(name="default without the noise-scale shape", noise_shape=False),
    ]  # fmt: skip


class SyntheticConfig(BaseModel):
    """The synthetic-seed harness: N(b) drawn from a fit to the real seeds (issue 41)."""

    model_config = ConfigDict(frozen=True)

    seeds: Annotated[int, Field(ge=2)] = 500
    horizon: Annotated[int, Field(ge=2)] = 20
    profiles: Annotated[int, Field(ge=1)] = 20  # frontier profiles per cell, reused in turn
    # of the covariance towards a constant-correlation target
    shrinkage: Annotated[float, Field(ge=0, le=1)] = 0.5
    seed: int = 0


class RecurringConfig(BaseModel):
    """The recurring column: jobs per sequence, the default policy and those compared with it."""

    model_config = ConfigDict(frozen=True)

    jobs: Annotated[int, Field(ge=1)] = 5
    policy: Policy = Policy()
    policies: list[Policy] = Field(default_factory=comparison_policies)
    synthetic: SyntheticConfig = SyntheticConfig()


class BenchConfig(BaseModel):
    """Everything one `bench paper` run computes."""

    model_config = ConfigDict(frozen=True)

    scale: str
    workloads: list[WorkloadConfig] = Field(min_length=1)
    boards: list[BoardConfig] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    power_metric: PowerMetric = PowerMetric.peak
    profiling: ProfilingCost = ProfilingCost()
    predicted: PredictedProfiling = PredictedProfiling()
    device: str = "auto"  # where estimates train; not in their cache key (r is device-free)
    recurring: RecurringConfig = RecurringConfig()
    interpolated: bool = Field(
        default=False,
        description="read N where the accuracy curve crossed the target (recorded runs only)",
    )


def scaled_limit_w(
    nano_limit_w: float, nano_range_w: tuple[float, float], board_range_w: tuple[float, float]
) -> float:
    """A Nano limit moved to another board: same place in its power range, rounded to 0.5 W."""
    lo, hi = nano_range_w
    fraction = (nano_limit_w - lo) / (hi - lo)
    b_lo, b_hi = board_range_w
    return round((b_lo + fraction * (b_hi - b_lo)) * 2) / 2


def _power_range_w(board: str, batch_sizes: Sequence[int]) -> tuple[float, float]:
    from edgetrain.device.sim import BOARDS, ground_truth

    model, shape, classes = LIMIT_REFERENCE_MODEL
    peaks = [
        ground_truth(board, workload_cost(model, shape, classes), b, f).peak_power_w
        for b in batch_sizes
        for f in BOARDS[board].gpu_freqs_hz
    ]
    return min(peaks), max(peaks)


def board_limits_w(board: str, batch_sizes: Sequence[int]) -> list[float | None]:
    """The paper's Nano limits (4.5 W, 7 W, none), moved to other boards by their power range.

    The range is the twin's ResNet18 (3×32×32) peak power over the batch sizes and the board's
    whole frequency table, so the limits bind for a paper-size workload on every board.
    """
    if board == "jetson-nano":
        return [*NANO_PAPER_LIMITS_W, None]
    nano, other = _power_range_w("jetson-nano", batch_sizes), _power_range_w(board, batch_sizes)
    return [*(scaled_limit_w(w, nano, other) for w in NANO_PAPER_LIMITS_W), None]


# Targets sit where the CPU-sized budgets still see every batch size climb (calibrated on seed 0).
SMALL_IMAGE_SETS = [
    DatasetRef(name="mnist", limit=1000, target_accuracy=0.5),
    DatasetRef(name="fashion-mnist", limit=1000, target_accuracy=0.5),
    DatasetRef(name="digits", limit=None, target_accuracy=0.6),
]


SMALL_TEXT_SETS = [
    DatasetRef(name="tom-sawyer", limit=500, target_accuracy=0.25),
    DatasetRef(name="sherlock-holmes", limit=500, target_accuracy=0.25),
    DatasetRef(name="austen-emma", limit=500, target_accuracy=0.25),
]


def small_config(seeds: Sequence[int] | None = None) -> BenchConfig:
    """The CPU-sized configuration (~10 minutes on 2 idle cores when nothing is cached)."""
    batch_sizes = [8, 16, 32, 64]
    image_opt = OptimizerSpec(learning_rate=1e-2, reference_batch_size=64)
    text_opt = OptimizerSpec(name=OptimizerName.adamw, learning_rate=3e-3, reference_batch_size=64)
    image = {
        "datasets": SMALL_IMAGE_SETS,
        "proxy": "mnist",
        "targets": ["fashion-mnist", "digits"],
        "batch_sizes": batch_sizes,
        "optimizer": image_opt,
        # b=64 makes only 48 steps in 3072 samples and misses 0.5 on MNIST; 4096 reaches it.
        "sample_budget": 4096,
        "eval_interval_samples": 256,
        "eval_samples": 200,
    }
    boards = ["jetson-nano", "jetson-tx2-nx", "jetson-orin-nano"]
    return BenchConfig(
        scale=Scale.small.value,
        workloads=[
            WorkloadConfig(label="resnet8-w025", model="resnet8-w025", **image),
            WorkloadConfig(label="mobilenetv2-w025", model="mobilenetv2-w025", **image),
            WorkloadConfig(
                label="charformer-small",
                model="charformer-small",
                datasets=SMALL_TEXT_SETS,
                proxy="tom-sawyer",
                targets=["sherlock-holmes", "austen-emma"],
                batch_sizes=batch_sizes,
                optimizer=text_opt,
                sample_budget=3072,
                eval_interval_samples=256,
                eval_samples=None,
            ),
            # N(b) from the small ResNet (cached above), T_s and P from the twin's ResNet18 at
            # the paper's 3×32×32: the tiny models are launch-overhead bound on the twin, where
            # frequency barely matters; this row shows the method where it does.
            WorkloadConfig(
                label="resnet8-w025 N × resnet18 twin",
                model="resnet8-w025",
                twin_model="resnet18",
                twin_input_shape=(3, 32, 32),
                twin_num_classes=10,
                **image,
            ),
        ],
        boards=[
            BoardConfig(board=b, power_limits_w=board_limits_w(b, batch_sizes)) for b in boards
        ],
        seeds=list(seeds) if seeds is not None else [0, 1],
    )


#: Batch sizes of the paper (and of the cpu and paper scales).
PAPER_BATCH_SIZES = [4, 8, 16, 32, 64, 128]
#: The paper's three boards (twin names).
PAPER_BOARDS = ["jetson-nano", "jetson-tx2-nx", "jetson-agx-orin"]

# Targets: a little below the plateau of a seed-0 curve per (model, set) trained to the budget
# at b = 4 and the largest b, one thread (docs/benchmarks/paper.md, "Targets"), set once before
# the run of record, never tuned towards the paper's ratios. Text has no plateau within a CPU
# budget: its target is what the largest batch size reaches by about 40k samples. One proxy and
# one target per model (the paper has three sets).
TARGET_MNIST, TARGET_FMNIST = 0.92, 0.80
TARGET_MB_MNIST, TARGET_MB_FMNIST = 0.94, 0.82
TARGET_TOM, TARGET_SHERLOCK = 0.42, 0.40
# Budgets: past every batch size's expected samples to target (a miss costs the whole budget).
BUDGET_RESNET, BUDGET_MOBILENET, BUDGET_TEXT = 81_920, 51_200, 51_200
CPU_IMAGE_SETS = [
    DatasetRef(name="mnist", target_accuracy=TARGET_MNIST),
    DatasetRef(name="fashion-mnist", limit=20_000, target_accuracy=TARGET_FMNIST),
]
CPU_MOBILENET_SETS = [
    DatasetRef(name="mnist", target_accuracy=TARGET_MB_MNIST),
    DatasetRef(name="fashion-mnist", limit=20_000, target_accuracy=TARGET_MB_FMNIST),
]
CPU_TEXT_SETS = [
    DatasetRef(name="tom-sawyer", target_accuracy=TARGET_TOM),
    DatasetRef(name="sherlock-holmes", target_accuracy=TARGET_SHERLOCK),
]


def cpu_config(seeds: Sequence[int] | None = None) -> BenchConfig:
    """The paper's method and shapes, sized for a 2-core CPU: N(b) from small models trained for
    real (10⁴–10⁵ samples each), time and power from the twin of the paper's models."""
    from edgetrain.workloads.datasets import VOCABULARY
    from edgetrain.workloads.training import TEXT_SEQ_LEN

    # Adam with square-root scaling as in the paper, at a rate the small models need (the paper's
    # 5e-4 at b=128 is for the full-width networks).
    image_opt = OptimizerSpec(learning_rate=2e-3, reference_batch_size=128)
    image = {
        "proxy": "mnist",
        "targets": ["fashion-mnist"],
        "optimizer": image_opt,
        "twin_input_shape": (3, 32, 32),
        "twin_num_classes": 10,
        "eval_interval_samples": 1024,
        "eval_samples": 2000,
    }
    return BenchConfig(
        scale=Scale.cpu.value,
        workloads=[
            WorkloadConfig(
                label="resnet18/resnet8-w025",
                model="resnet8-w025",
                twin_model="resnet18",
                datasets=CPU_IMAGE_SETS,
                batch_sizes=PAPER_BATCH_SIZES,
                sample_budget=BUDGET_RESNET,
                **image,
            ),
            WorkloadConfig(
                label="charformer/charformer-small",
                model="charformer-small",
                twin_model="charformer",
                twin_input_shape=(TEXT_SEQ_LEN,),
                twin_num_classes=len(VOCABULARY),
                datasets=CPU_TEXT_SETS,
                proxy="tom-sawyer",
                targets=["sherlock-holmes"],
                batch_sizes=PAPER_BATCH_SIZES,
                optimizer=OptimizerSpec(
                    name=OptimizerName.adamw, learning_rate=3e-3, reference_batch_size=128
                ),
                sample_budget=BUDGET_TEXT,
                eval_interval_samples=1024,
                eval_samples=256,  # windows of 64 characters: 16,384 predictions per evaluation
            ),
            # Last: the costliest trainings (depthwise convolutions on one core), so the other two
            # rows are cached first if a run must stop. The paper omits b=128 for MobileNetV2.
            WorkloadConfig(
                label="mobilenetv2/mobilenetv2-tiny",
                model="mobilenetv2-tiny",
                twin_model="mobilenetv2",
                datasets=CPU_MOBILENET_SETS,
                batch_sizes=PAPER_BATCH_SIZES[:-1],
                sample_budget=BUDGET_MOBILENET,
                **image,
            ),
        ],
        boards=[
            BoardConfig(board=b, power_limits_w=board_limits_w(b, PAPER_BATCH_SIZES))
            for b in PAPER_BOARDS
        ],
        # 0–4: the cold run of record; 5–6: trained later (issue 41), with crossings and noise
        # scales recorded (docs/benchmarks/paper.md, "How this was run").
        seeds=list(seeds) if seeds is not None else list(range(7)),
    )


def paper_config(seeds: Sequence[int] | None = None) -> BenchConfig:
    """The paper-like configuration: full models and data, batch sizes 4–128, five seeds."""
    image_sets = [
        DatasetRef(name="mnist", target_accuracy=0.98),
        DatasetRef(name="fashion-mnist", limit=22_500, target_accuracy=0.88),
        DatasetRef(name="digits", target_accuracy=0.97),
    ]
    text_sets = [
        DatasetRef(name="tom-sawyer", target_accuracy=0.55),
        DatasetRef(name="sherlock-holmes", target_accuracy=0.55),
        DatasetRef(name="austen-emma", target_accuracy=0.55),
    ]
    adam = OptimizerSpec()  # the paper: Adam, 5e-4 at b=128, square-root scaling
    image = {
        "datasets": image_sets,
        "proxy": "mnist",
        "targets": ["fashion-mnist", "digits"],
        "optimizer": adam,
        "sample_budget": 400_000,
        "eval_interval_samples": 1024,
    }
    all_b = [4, 8, 16, 32, 64, 128]
    boards = ["jetson-nano", "jetson-tx2-nx", "jetson-agx-orin"]
    return BenchConfig(
        scale=Scale.paper.value,
        workloads=[
            WorkloadConfig(label="resnet18", model="resnet18", batch_sizes=all_b, **image),
            # The paper omits b=128 for MobileNetV2 (memory).
            WorkloadConfig(
                label="mobilenetv2", model="mobilenetv2", batch_sizes=all_b[:-1], **image
            ),
            WorkloadConfig(
                label="charformer",
                model="charformer",
                datasets=text_sets,
                proxy="tom-sawyer",
                targets=["sherlock-holmes", "austen-emma"],
                batch_sizes=all_b,
                optimizer=OptimizerSpec(name=OptimizerName.adamw, learning_rate=1e-3),
                sample_budget=400_000,
                eval_interval_samples=1024,
                eval_samples=2000,
            ),
        ],
        boards=[BoardConfig(board=b, power_limits_w=board_limits_w(b, all_b)) for b in boards],
        seeds=list(seeds) if seeds is not None else [0, 1, 2, 3, 4],
    )


def config_for(scale: Scale, seeds: Sequence[int] | None = None) -> BenchConfig:
    """The named configuration."""
    if scale is Scale.small:
        return small_config(seeds)
    return cpu_config(seeds) if scale is Scale.cpu else paper_config(seeds)
