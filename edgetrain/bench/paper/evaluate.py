"""Each case on the twin: the true LUT, a frontier profile, the choices of edgetrain, B1, B2 and
the oracle, and their summaries."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel

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


def evaluate_case(
    truth: Lut,
    profile: FrontierProfile,
    proxy: EstimateRecord,
    target: EstimateRecord,
    power_limit_w: float | None,
    metric: PowerMetric,
) -> dict[str, ChoiceOutcome | None]:
    """B1, B2, edgetrain and the oracle for one proxy/target pair on one profile."""
    limit = math.inf if power_limit_w is None else power_limit_w
    target_samples = {
        b: s for b, s in zip(target.batch_sizes, target.samples_to_accuracy, strict=True) if s
    }
    out: dict[str, ChoiceOutcome | None] = {"b1": None, "b2": None, "edgetrain": None}
    b1, b2 = baseline_batches(proxy.batch_sizes, proxy.samples_to_accuracy)
    if profile.baseline_freq_hz is not None:
        f = profile.baseline_freq_hz
        out["b1"] = outcome(truth, b1, f, target_samples, limit, metric)
        if b2 is not None:
            out["b2"] = outcome(truth, b2, f, target_samples, limit, metric)
    efficiency = proxy.efficiency()
    if efficiency is not None and profile.points:
        try:
            chosen = plan(Lut.from_points(profile.points), efficiency, limit, metric=metric)
        except InfeasibleError:
            chosen = None
        if chosen is not None:
            out["edgetrain"] = outcome(
                truth, chosen.batch_size, chosen.gpu_freq_hz, target_samples, limit, metric
            )
    cell = oracle_cell(truth, aligned(truth.batch_sizes.tolist(), target_samples), limit, metric)
    out["oracle"] = (
        None
        if cell is None
        else outcome(
            truth,
            int(truth.batch_sizes[cell[0]]),
            int(truth.gpu_freqs_hz[cell[1]]),
            target_samples,
            limit,
            metric,
        )
    )
    return out


def choice_label(choice: ChoiceOutcome | None) -> str:
    """`b@MHz` for a table cell."""
    return "—" if choice is None else f"{choice.batch_size}@{choice.gpu_freq_hz / MHZ:g}"


def _tta(choice: ChoiceOutcome | None) -> float | None:
    return None if choice is None else choice.tta_s


def _energy(choice: ChoiceOutcome | None) -> float | None:
    return None if choice is None else choice.energy_j


def summarise(cases: Sequence[CaseOutcome]) -> CaseSummary:
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
    )


def evaluate_all(config: BenchConfig, estimates: dict[str, EstimateRecord]) -> list[CaseOutcome]:
    """Every (workload, proxy, target, board, limit, seed) from cached estimates (pure twin)."""
    cases: list[CaseOutcome] = []
    for w in config.workloads:
        model, shape, classes = twin_shape(w)
        for board in config.boards:
            truth = truth_lut(board.board, model, shape, classes, w.batch_sizes)
            for limit in board.power_limits_w:
                for seed in config.seeds:
                    rng = np.random.default_rng(case_seed(w.label, board.board, limit, seed))
                    profile = frontier_profile(
                        truth, board.board, limit, rng, config.profiling, config.power_metric
                    )
                    for proxy in w.datasets:
                        for target in w.datasets:
                            got = evaluate_case(
                                truth,
                                profile,
                                estimates[estimate_key(w, proxy, seed)],
                                estimates[estimate_key(w, target, seed)],
                                limit,
                                config.power_metric,
                            )
                            cases.append(
                                CaseOutcome(
                                    workload=w.label,
                                    proxy=proxy.name,
                                    target=target.name,
                                    board=board.board,
                                    power_limit_w=limit,
                                    seed=seed,
                                    baseline_freq_hz=profile.baseline_freq_hz,
                                    baseline_freq_source=profile.baseline_freq_source,
                                    frontier_points=len(profile.points),
                                    grid_points=truth.time_per_sample_s.size,
                                    profiling_s=profile.device_s,
                                    overhead_share=ratio(profile.device_s, _tta(got["edgetrain"])),
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
                        summarise(groups[(w.label, w.proxy, target, board.board, limit)])
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
