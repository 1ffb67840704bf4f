"""Each case on the twin: the true LUT, a frontier profile, the choices of edgetrain, B1, B2 and
the oracle, and their summaries."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.plan import PowerMetric
from edgetrain.api.profile import ProfilePoint
from edgetrain.bench.paper.arithmetic import (
    aligned,
    baseline_batches,
    case_seed,
    mean_std,
    noisy_measure,
    oracle_cell,
    profiling_device_time_s,
    ratio,
    time_to_accuracy_s,
)
from edgetrain.bench.paper.config import (
    MHZ,
    NANO_PAPER_BASELINE_HZ,
    BenchConfig,
    ProfilingCost,
    WorkloadConfig,
)
from edgetrain.bench.paper.estimates import estimate_key
from edgetrain.bench.paper.profiles import (
    PredictionFit,
    SimulatedProfile,
    full_profile,
    predicted_profile,
)
from edgetrain.bench.paper.proxies import first_plan_inputs, population_for, run_pairs
from edgetrain.bench.paper.results import (
    CaseOutcome,
    CaseSummary,
    ChoiceOutcome,
    EstimateRecord,
    SensitivityCell,
)
from edgetrain.planner import (
    InfeasibleError,
    Lut,
    baseline_column,
    frontier_order,
    plan,
)
from edgetrain.planner.tilt import TiltPrior
from edgetrain.workloads import workload_cost


def twin_shape(workload: WorkloadConfig) -> tuple[str, tuple[int, ...], int]:
    """Model, input shape and class count the twin times for this workload."""
    from edgetrain.workloads import datasets
    from edgetrain.workloads.training import TEXT_SEQ_LEN

    if workload.twin_model is not None:
        if workload.twin_input_shape is None or workload.twin_num_classes is None:
            raise ValueError(f"{workload.label}: twin_model needs twin_input_shape and classes")
        return workload.twin_model, workload.twin_input_shape, workload.twin_num_classes
    first = workload.datasets[0]
    if first.name in datasets.IMAGE_SETS:
        data = datasets.load_images(first.name, first.limit)
        return workload.model, data.input_shape, data.num_classes
    return workload.model, (TEXT_SEQ_LEN,), len(datasets.VOCABULARY)


def truth_lut(
    board: str, model: str, shape: tuple[int, ...], classes: int, batch_sizes: list[int]
) -> Lut:
    """The twin's noise-free grid over the batch sizes and the board's frequency table."""
    from edgetrain.device.sim import BOARDS, ground_truth

    freqs = sorted(BOARDS[board].gpu_freqs_hz)
    bs = sorted(batch_sizes)
    cells = [
        [ground_truth(board, workload_cost(model, shape, classes), b, f) for f in freqs] for b in bs
    ]
    return Lut.from_grid(
        bs,
        freqs,
        np.array([[g.time_per_sample_s for g in row] for row in cells]),
        np.array([[g.peak_power_w for g in row] for row in cells]),
        np.array([[g.mean_power_w for g in row] for row in cells]),
    )


def outcome(
    truth: Lut,
    batch_size: int,
    gpu_freq_hz: int,
    target_samples: dict[int, float],
    power_limit_w: float,
    metric: PowerMetric,
) -> ChoiceOutcome:
    """What (b, f) truly costs on the target data, on the twin's noise-free grid."""
    i = int(np.flatnonzero(truth.batch_sizes == batch_size)[0])
    j = int(np.flatnonzero(truth.gpu_freqs_hz == gpu_freq_hz)[0])
    t = float(truth.time_per_sample_s[i, j])
    mean_w = float(truth.mean_power_w[i, j])
    n = target_samples.get(batch_size)
    tta = time_to_accuracy_s(t, n)
    return ChoiceOutcome(
        batch_size=batch_size,
        gpu_freq_hz=gpu_freq_hz,
        time_per_sample_s=t,
        peak_power_w=float(truth.peak_power_w[i, j]),
        mean_power_w=mean_w,
        samples_to_accuracy=n,
        tta_s=tta,
        energy_j=None if tta is None else mean_w * tta,
        within_limit=float(truth.power(metric)[i, j]) <= power_limit_w,
    )


def oracle_outcome(
    truth: Lut, target_samples: dict[int, float], power_limit_w: float, metric: PowerMetric
) -> ChoiceOutcome | None:
    """The best (b, f) within the limit on the truth, and what it costs; None: none fits."""
    cell = oracle_cell(
        truth, aligned(truth.batch_sizes.tolist(), target_samples), power_limit_w, metric
    )
    if cell is None:
        return None
    return outcome(
        truth,
        int(truth.batch_sizes[cell[0]]),
        int(truth.gpu_freqs_hz[cell[1]]),
        target_samples,
        power_limit_w,
        metric,
    )


class FrontierProfile(BaseModel):
    """A simulated frontier profile and the baselines' frequency it implies."""

    points: list[ProfilePoint]
    baseline_freq_hz: int | None
    baseline_freq_source: Literal["paper", "baseline_column"]
    device_s: float


def frontier_profile(
    truth: Lut,
    board: str,
    power_limit_w: float | None,
    rng: np.random.Generator,
    cost: ProfilingCost,
    metric: PowerMetric,
) -> FrontierProfile:
    """Profile in frontier order with measurement noise; B1/B2's frequency from paper or column."""
    limit = math.inf if power_limit_w is None else power_limit_w
    measured, measure = noisy_measure(truth, rng, cost)
    bs = [int(b) for b in truth.batch_sizes]
    for _ in frontier_order(bs, [int(f) for f in truth.gpu_freqs_hz], measure, limit, metric):
        pass
    if board == "jetson-nano" and power_limit_w in NANO_PAPER_BASELINE_HZ:
        freq: int | None = NANO_PAPER_BASELINE_HZ[power_limit_w]
        source: Literal["paper", "baseline_column"] = "paper"
    else:
        freq, _ = baseline_column(measured, bs, limit, metric)
        source = "baseline_column"
    return FrontierProfile(
        points=measured,
        baseline_freq_hz=freq,
        baseline_freq_source=source,
        device_s=profiling_device_time_s(measured, cost),
    )


def target_samples_of(target: EstimateRecord, interpolated: bool = False) -> dict[int, float]:
    """N_target(b) for the batch sizes that reached the target."""
    samples = target.samples(interpolated)
    return {b: s for b, s in zip(target.batch_sizes, samples, strict=True) if s}


def planned(
    truth: Lut,
    points: Sequence[ProfilePoint],
    efficiency: EfficiencyVector | None,
    target_samples: dict[int, float],
    limit_w: float,
    metric: PowerMetric,
) -> ChoiceOutcome | None:
    """`edgetrain plan` on these profile points with the first plan's r, judged on the truth."""
    if efficiency is None or not points:
        return None
    try:
        chosen = plan(Lut.from_points(points), efficiency, limit_w, metric=metric)
    except InfeasibleError:
        return None
    return outcome(truth, chosen.batch_size, chosen.gpu_freq_hz, target_samples, limit_w, metric)


def evaluate_case(
    truth: Lut,
    profile: FrontierProfile,
    proxy: EstimateRecord,
    target: EstimateRecord,
    power_limit_w: float | None,
    metric: PowerMetric,
    vector: EfficiencyVector | None = None,
    interpolated: bool = False,
) -> dict[str, ChoiceOutcome | None]:
    """B1, B2, edgetrain and the oracle for one proxy/target pair on one profile (`vector`: the
    first plan's r; default: the proxy's own)."""
    vector = vector or proxy.efficiency(interpolated)
    limit = math.inf if power_limit_w is None else power_limit_w
    target_samples = target_samples_of(target, interpolated)
    out: dict[str, ChoiceOutcome | None] = {"b1": None, "b2": None, "edgetrain": None}
    b1, b2 = baseline_batches(proxy.batch_sizes, proxy.samples(interpolated))
    if profile.baseline_freq_hz is not None:
        f = profile.baseline_freq_hz
        out["b1"] = outcome(truth, b1, f, target_samples, limit, metric)
        if b2 is not None:
            out["b2"] = outcome(truth, b2, f, target_samples, limit, metric)
    out["edgetrain"] = planned(truth, profile.points, vector, target_samples, limit, metric)
    out["oracle"] = oracle_outcome(truth, target_samples, limit, metric)
    return out


def choice_label(choice: ChoiceOutcome | None) -> str:
    """`b@MHz` for a table cell."""
    return "—" if choice is None else f"{choice.batch_size}@{choice.gpu_freq_hz / MHZ:g}"


def _tta(choice: ChoiceOutcome | None) -> float | None:
    return None if choice is None else choice.tta_s


def _energy(choice: ChoiceOutcome | None) -> float | None:
    return None if choice is None else choice.energy_j


def summarise(cases: Sequence[CaseOutcome], metric: PowerMetric = PowerMetric.peak) -> CaseSummary:
    """One main-table row from the seeds of one case."""
    first = cases[0]

    def labels(name: str) -> list[str]:
        return sorted({choice_label(getattr(c, name)) for c in cases})

    return CaseSummary(
        workload=first.workload,
        proxy=first.proxy,
        target=first.target,
        board=first.board,
        power_limit_w=first.power_limit_w,
        baseline_freq_hz=first.baseline_freq_hz,
        baseline_freq_source=first.baseline_freq_source,
        b1_tta_s=mean_std(_tta(c.b1) for c in cases),
        b2_tta_s=mean_std(_tta(c.b2) for c in cases),
        edgetrain_tta_s=mean_std(_tta(c.edgetrain) for c in cases),
        oracle_tta_s=mean_std(_tta(c.oracle) for c in cases),
        edgetrain_over_oracle=mean_std(ratio(_tta(c.edgetrain), _tta(c.oracle)) for c in cases),
        b1_over_edgetrain=mean_std(ratio(_tta(c.b1), _tta(c.edgetrain)) for c in cases),
        b2_over_edgetrain=mean_std(ratio(_tta(c.b2), _tta(c.edgetrain)) for c in cases),
        b1_energy_j=mean_std(_energy(c.b1) for c in cases),
        b2_energy_j=mean_std(_energy(c.b2) for c in cases),
        edgetrain_energy_j=mean_std(_energy(c.edgetrain) for c in cases),
        oracle_energy_j=mean_std(_energy(c.oracle) for c in cases),
        overhead_share=mean_std(c.overhead_share for c in cases),
        frontier_points=mean_std(float(c.frontier_points) for c in cases),
        grid_points=first.grid_points,
        b1_choices=labels("b1"),
        b2_choices=labels("b2"),
        edgetrain_choices=labels("edgetrain"),
        oracle_choices=labels("oracle"),
        edgetrain_over_limit=sum(
            1 for c in cases if c.edgetrain is not None and not c.edgetrain.within_limit
        ),
        full_tta_s=mean_std(_tta(c.full) for c in cases),
        predicted_tta_s=mean_std(_tta(c.predicted) for c in cases),
        full_over_oracle=mean_std(ratio(_tta(c.full), _tta(c.oracle)) for c in cases),
        predicted_over_oracle=mean_std(ratio(_tta(c.predicted), _tta(c.oracle)) for c in cases),
        predicted_over_full=mean_std(ratio(_tta(c.predicted), _tta(c.full)) for c in cases),
        full_overhead_share=mean_std(c.full_overhead_share for c in cases),
        predicted_overhead_share=mean_std(c.predicted_overhead_share for c in cases),
        predicted_points=first.predicted_points,
        full_choices=labels("full"),
        predicted_choices=labels("predicted"),
        predicted_over_limit=sum(
            1 for c in cases if c.predicted is not None and not c.predicted.within_limit
        ),
        predicted_over_limit_1w=sum(
            1 for c in cases if over_limit_w(c.predicted, c.power_limit_w, metric) > 1.0
        ),
    )


def over_limit_w(choice: ChoiceOutcome | None, limit_w: float | None, metric: PowerMetric) -> float:
    """How far the choice's true power is above the limit (≤ 0: within; 0 without a choice)."""
    if choice is None or limit_w is None:
        return 0.0
    power = choice.peak_power_w if metric is PowerMetric.peak else choice.mean_power_w
    return power - limit_w


def _predicted_one(
    config_json: str, label: str, board: str, seed: int
) -> tuple[SimulatedProfile, PredictionFit]:
    """One predicted profile, in this or a worker process (top level so it pickles)."""
    import torch

    torch.set_num_threads(1)  # tiny MLPs: threads cost more than they give, and cores are shared
    config = BenchConfig.model_validate_json(config_json)
    w = next(w for w in config.workloads if w.label == label)
    model, shape, classes = twin_shape(w)
    truth = truth_lut(board, model, shape, classes, w.batch_sizes)
    # Its own RNG stream: the frontier profiles stay what they were before this column existed.
    rng = np.random.default_rng(case_seed(label, board, "predicted", seed))
    profile, fit = predicted_profile(truth, board, rng, config.profiling, config.predicted, seed)
    return profile, fit.model_copy(update={"workload": label})


def _predicted_all(
    config: BenchConfig, keys: list[tuple[str, str, int]], jobs: int
) -> dict[tuple[str, str, int], tuple[SimulatedProfile, PredictionFit]]:
    """Every predicted profile (MLP transfers: seconds each), in `jobs` processes."""
    config_json = config.model_dump_json()
    if jobs <= 1:
        return {key: _predicted_one(config_json, *key) for key in keys}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")  # as estimate_all: no forked torch pools
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {key: pool.submit(_predicted_one, config_json, *key) for key in keys}
        return {key: future.result() for key, future in futures.items()}


def evaluate_all(
    config: BenchConfig, estimates: dict[str, EstimateRecord], *, jobs: int = 1
) -> tuple[list[CaseOutcome], list[PredictionFit]]:
    """Every (workload, proxy, target, board, limit, seed) from cached estimates (pure twin), and
    the fit of every predicted profile."""
    keys = [
        (w.label, b.board, seed)
        for w in config.workloads
        for b in config.boards
        for seed in config.seeds
    ]
    predicted = _predicted_all(config, keys, jobs)
    own = run_pairs(config, estimates)
    policy = config.recurring.policy
    tilts = {w.label: population_for(config, w, own, policy) for w in config.workloads}
    cases: list[CaseOutcome] = []
    for w in config.workloads:
        model, shape, classes = twin_shape(w)
        for board in config.boards:
            truth = truth_lut(board.board, model, shape, classes, w.batch_sizes)
            for seed in config.seeds:
                # One full and one predicted profile per (model, board, seed): neither depends on
                # the limit, unlike the frontier order.
                full = full_profile(
                    truth,
                    np.random.default_rng(case_seed(w.label, board.board, "full", seed)),
                    config.profiling,
                )
                profile, _fit = predicted[(w.label, board.board, seed)]
                for limit in board.power_limits_w:
                    cases += _cases_at(
                        config, w, board.board, truth, limit, seed, full, profile, estimates,
                        tilts[w.label],
                    )
    return cases, [fit for _profile, fit in predicted.values()]


def _cases_at(
    config: BenchConfig,
    w: WorkloadConfig,
    board: str,
    truth: Lut,
    limit: float | None,
    seed: int,
    full: SimulatedProfile,
    predicted: SimulatedProfile,
    estimates: dict[str, EstimateRecord],
    tilt: TiltPrior | None = None,
) -> list[CaseOutcome]:
    """Every proxy × target pair of one workload on one board, limit and seed; edgetrain plans
    with the default estimate (`recurring.policy.proxy_seeds` seeds) and the tilt prior."""
    rng = np.random.default_rng(case_seed(w.label, board, limit, seed))
    metric = config.power_metric
    profile = frontier_profile(truth, board, limit, rng, config.profiling, metric)
    limit_w = math.inf if limit is None else limit
    cases: list[CaseOutcome] = []
    interpolated = config.interpolated
    for proxy_ref in w.datasets:
        proxy, vector = first_plan_inputs(
            config, w, proxy_ref.name, seed, estimates, config.recurring.policy, tilt
        )
        for target_ref in w.datasets:
            target = estimates[estimate_key(w, target_ref, seed)]
            got = evaluate_case(truth, profile, proxy, target, limit, metric, vector, interpolated)
            samples = target_samples_of(target, interpolated)
            full_choice = planned(truth, full.points, vector, samples, limit_w, metric)
            predicted_choice = planned(truth, predicted.points, vector, samples, limit_w, metric)
            cases.append(
                CaseOutcome(
                    workload=w.label,
                    proxy=proxy_ref.name,
                    target=target_ref.name,
                    board=board,
                    power_limit_w=limit,
                    seed=seed,
                    baseline_freq_hz=profile.baseline_freq_hz,
                    baseline_freq_source=profile.baseline_freq_source,
                    frontier_points=len(profile.points),
                    grid_points=truth.time_per_sample_s.size,
                    profiling_s=profile.device_s,
                    overhead_share=ratio(profile.device_s, _tta(got["edgetrain"])),
                    full=full_choice,
                    full_profiling_s=full.device_s,
                    full_overhead_share=ratio(full.device_s, _tta(full_choice)),
                    predicted=predicted_choice,
                    predicted_points=predicted.measured,
                    predicted_profiling_s=predicted.device_s,
                    predicted_overhead_share=ratio(predicted.device_s, _tta(predicted_choice)),
                    **got,
                )
            )
    return cases


def summaries_and_sensitivity(
    config: BenchConfig, cases: Sequence[CaseOutcome]
) -> tuple[list[CaseSummary], list[SensitivityCell]]:
    """Main-table rows (configured proxy → targets) and every proxy × target cell."""
    groups: dict[tuple[str, str, str, str, float | None], list[CaseOutcome]] = {}
    for c in cases:
        groups.setdefault((c.workload, c.proxy, c.target, c.board, c.power_limit_w), []).append(c)
    summaries: list[CaseSummary] = []
    sensitivity: list[SensitivityCell] = []
    for w in config.workloads:
        for board in config.boards:
            for limit in board.power_limits_w:
                for target in w.targets:
                    summaries.append(
                        summarise(
                            groups[(w.label, w.proxy, target, board.board, limit)],
                            config.power_metric,
                        )
                    )
                for proxy in w.datasets:
                    for target_ref in w.datasets:
                        seeds = groups[(w.label, proxy.name, target_ref.name, board.board, limit)]
                        sensitivity.append(
                            SensitivityCell(
                                workload=w.label,
                                board=board.board,
                                power_limit_w=limit,
                                proxy=proxy.name,
                                target=target_ref.name,
                                edgetrain_over_oracle=mean_std(
                                    ratio(_tta(c.edgetrain), _tta(c.oracle)) for c in seeds
                                ),
                            )
                        )
    return summaries, sensitivity
