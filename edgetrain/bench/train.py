"""`edgetrain bench train`: edgetrain's training loop against a plain PyTorch loop, same run.

Both loops train their own copy of one initialised model on the same samples in the same order;
segments alternate (edgetrain first on even repetitions, plain first on odd) so drift in a
shared machine's speed hits both alike; the ratio is the median of the per-repetition ratios.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from pydantic import BaseModel
from torch import nn

from edgetrain.api.training import OptimizerSpec
from edgetrain.workloads.accel import Accelerator, resolve
from edgetrain.workloads.training import (
    Task,
    TrainState,
    configure_threads,
    load_task,
    make_model,
    make_optimizer,
    train_to_target,
)

TARGET_RATIO = 0.95
# Cheap registry models and the data set each trains on here.
BENCH_MODELS: dict[str, str] = {
    "resnet8-w025": "fashion-mnist",
    "resnet8": "fashion-mnist",
    "mobilenetv2-w025": "fashion-mnist",
    "charformer-small": "tom-sawyer",
}
BENCH_BATCH_SIZES = [4, 8, 16, 32, 64, 128]
# A larger rate than the paper's so that the few steps of --quick visibly lower the loss.
BENCH_OPTIMIZER = OptimizerSpec(learning_rate=2e-3, reference_batch_size=64)
PROBE_SAMPLES = 256


class TrainBenchRow(BaseModel):
    """One (model, device, batch size): both loops' throughput and proof that both trained."""

    model: str
    dataset: str
    device: str
    batch_size: int
    steps_per_segment: int
    repeats: int
    edgetrain_samples_per_s: float
    plain_samples_per_s: float
    ratio: float  # median over repetitions of edgetrain / plain (adjacent segments)
    ratios: list[float]  # per repetition, in order
    edgetrain_samples: int
    plain_samples: int
    edgetrain_loss_before: float
    edgetrain_loss_after: float
    plain_loss_before: float
    plain_loss_after: float


class TrainBenchResult(BaseModel):
    """Every row plus where and how it was measured."""

    command: str
    date: str
    machine: str
    torch_version: str
    threads: int
    target_ratio: float = TARGET_RATIO
    rows: list[TrainBenchRow]
    unmeasured_devices: list[str]


def machine_description() -> str:
    """CPU count and model, and the GPU if any (for the benchmark page)."""
    cpu = platform.processor() or platform.machine()
    text = f"{os.cpu_count()} CPU cores ({cpu}), {platform.system()}"
    if torch.cuda.is_available():
        text += f", {torch.cuda.get_device_name(0)}"
    else:
        text += ", no CUDA device"
    return text


@torch.no_grad()
def _probe_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    was_training = model.training
    model.eval()
    logits = model(x)
    loss = float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)))
    model.train(was_training)
    return loss


class _Pair:
    """Two identical models, one per loop, with their own optimizers and stream positions."""

    def __init__(self, name: str, task: Task, batch_size: int, accel: Accelerator) -> None:
        self.task, self.batch_size, self.accel = task, batch_size, accel
        torch.manual_seed(0)
        self.ours = make_model(name, task).to(accel.device)
        self.plain = make_model(name, task).to(accel.device)
        self.plain.load_state_dict(self.ours.state_dict())
        self.ours_opt = make_optimizer(BENCH_OPTIMIZER, self.ours, batch_size)
        self.plain_opt = make_optimizer(BENCH_OPTIMIZER, self.plain, batch_size)
        self.ours_state = TrainState()
        self.plain_samples = 0

    def run_ours(self, steps: int) -> float:
        """edgetrain's loop (`train_to_target`, with a step hook as `train` uses); seconds."""
        end = self.ours_state.samples + steps * self.batch_size
        stopped = [0.0]

        def on_step(state: TrainState, _batch_size: int) -> None:
            if state.samples >= end:  # the closing evaluation is not training time
                self.accel.synchronize()
                stopped[0] = time.perf_counter()

        self.accel.synchronize()
        start = time.perf_counter()
        self.ours_state = train_to_target(
            self.ours,
            self.ours_opt,
            self.task,
            batch_size=self.batch_size,
            target_accuracy=2.0,  # never reached: run the whole segment
            sample_budget=end,
            eval_interval_samples=1 << 40,
            seed=0,
            eval_samples=1,
            state=self.ours_state,
            on_step=on_step,
            accel=self.accel,
            scaler=None,
        )
        return stopped[0] - start

    def run_plain(self, steps: int) -> float:
        """The hand-written loop over the same samples, batches gathered beforehand; seconds."""
        b = self.batch_size
        batches = [
            self.task.batch(self.plain_samples + i * b, b, 0, self.accel.device)
            for i in range(steps)
        ]
        model, opt = self.plain, self.plain_opt
        self.accel.synchronize()
        start = time.perf_counter()
        model.train()
        for x, y in batches:
            opt.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
        self.accel.synchronize()
        elapsed = time.perf_counter() - start
        self.plain_samples += steps * b
        return elapsed


def bench_one(
    name: str,
    task: Task,
    batch_size: int,
    accel: Accelerator,
    *,
    repeats: int,
    segment_s: float,
) -> TrainBenchRow:
    """Alternate the two loops `repeats` times after a warm-up; medians and their ratio."""
    pair = _Pair(name, task, batch_size, accel)
    probe_x, probe_y = task.batch(0, min(PROBE_SAMPLES, task.train_size), 1, accel.device)
    before = _probe_loss(pair.ours, probe_x, probe_y), _probe_loss(pair.plain, probe_x, probe_y)
    # Warm-up (allocator, kernels, caches) doubles as the step-time estimate for segment length.
    warm = min(pair.run_ours(2), pair.run_plain(2)) / 2
    steps = max(3, round(segment_s / max(warm, 1e-6)))
    ours: list[float] = []
    plain: list[float] = []
    runners: list[tuple[Callable[[int], float], list[float]]] = [
        (pair.run_ours, ours),
        (pair.run_plain, plain),
    ]
    for rep in range(repeats):
        for run, out in runners if rep % 2 == 0 else runners[::-1]:
            out.append(steps * batch_size / run(steps))
    ours_sps, plain_sps = statistics.median(ours), statistics.median(plain)
    # Paired ratios: the two segments of a repetition are adjacent in time, so a burst of load
    # from other jobs skews one pair rather than one loop's whole median.
    ratios = [o / p for o, p in zip(ours, plain, strict=True)]
    return TrainBenchRow(
        model=name,
        dataset=task.name,
        device=accel.label,
        batch_size=batch_size,
        steps_per_segment=steps,
        repeats=repeats,
        edgetrain_samples_per_s=ours_sps,
        plain_samples_per_s=plain_sps,
        ratio=statistics.median(ratios),
        ratios=ratios,
        edgetrain_samples=pair.ours_state.samples,
        plain_samples=pair.plain_samples,
        edgetrain_loss_before=before[0],
        edgetrain_loss_after=_probe_loss(pair.ours, probe_x, probe_y),
        plain_loss_before=before[1],
        plain_loss_after=_probe_loss(pair.plain, probe_x, probe_y),
    )


def available_devices() -> tuple[list[str], list[str]]:
    """(devices to measure, devices that cannot be measured here)."""
    if torch.cuda.is_available():
        return ["cpu", "cuda"], []
    return ["cpu"], ["cuda"]


def run_bench(
    models: list[str],
    batch_sizes: list[int],
    *,
    devices: list[str] | None = None,
    repeats: int = 7,
    segment_s: float = 0.25,
    dataset_limit: int | None = None,
    command: str = "",
    on_row: Callable[[TrainBenchRow], None] | None = None,
) -> TrainBenchResult:
    """Every (device, model, batch size) case, each both loops alternated."""
    configure_threads()
    measured, unmeasured = available_devices()
    rows: list[TrainBenchRow] = []
    for device in devices or measured:
        accel = resolve(device)
        for name in models:
            task = load_task(BENCH_MODELS.get(name, "fashion-mnist"), dataset_limit)
            task = task.to(accel.device)
            for b in batch_sizes:
                row = bench_one(name, task, b, accel, repeats=repeats, segment_s=segment_s)
                rows.append(row)
                if on_row:
                    on_row(row)
    return TrainBenchResult(
        command=command,
        date=time.strftime("%Y-%m-%d %H:%M %Z"),
        machine=machine_description(),
        torch_version=torch.__version__,
        threads=torch.get_num_threads(),
        rows=rows,
        unmeasured_devices=[] if devices else unmeasured,
    )


def markdown_table(result: TrainBenchResult) -> str:
    """The rows as a Markdown table (for docs/benchmarks/train.md)."""
    lines = [
        "| device | model | batch | edgetrain samples/s | plain samples/s | ratio |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in result.rows:
        flag = "" if r.ratio >= result.target_ratio else " ⚠"
        lines.append(
            f"| {r.device} | {r.model} | {r.batch_size} | {r.edgetrain_samples_per_s:,.0f}"
            f" | {r.plain_samples_per_s:,.0f} | {r.ratio:.3f}{flag} |"
        )
    for device in result.unmeasured_devices:
        lines.append(f"| {device} | — | — | not measured (no {device} here) | — | — |")
    return "\n".join(lines) + "\n"
