"""Proxy estimation (first paper, §4.2): samples to the target accuracy for each batch size."""

from __future__ import annotations

import os
from typing import NamedTuple

import torch

from edgetrain.api.efficiency import (
    EfficiencyPart,
    EfficiencyVector,
    estimate_runs,
    target_not_reached_message,
    vector_from_runs,
)
from edgetrain.api.errors import BadInputError
from edgetrain.api.workload_spec import EstimateSpec
from edgetrain.workloads.accel import CUDA_CONTEXT_BYTES, Accelerator, peak_memory, resolve
from edgetrain.workloads.progress import Reporter
from edgetrain.workloads.training import (
    Task,
    configure_threads,
    load_task,
    make_model,
    make_optimizer,
    train_step,
    train_to_target,
)
from edgetrain.workloads.weights import load_pretrained

# Leave this share of free device memory unclaimed by parallel runs (allocator slack, spikes).
FREE_MEMORY_SHARE = 0.8


class TargetNotReachedError(BadInputError):
    """No batch size reached the target within the sample budget: the user's budget or target."""

    def __init__(self, spec: EstimateSpec, best: dict[int, float]) -> None:
        self.best_accuracy = best
        super().__init__(target_not_reached_message(
            spec.target_accuracy, spec.dataset, spec.sample_budget, best))


class RunOutcome(NamedTuple):
    """One (batch size, seed) run of an estimate."""

    samples: float | None  # where the curve crossed the target (interpolated); None: never
    best_accuracy: float
    gradient_noise_scale: float | None = None  # B_simple over the run; None: not measured
    grid_samples: int | None = None  # the first evaluation at the target (the old reading)


def _prepare(
    spec: EstimateSpec, task: Task, batch_size: int, seed: int, accel: Accelerator
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = make_model(spec.model, task)
    if spec.weights is not None:
        load_pretrained(model, spec.weights)
    model.to(accel.device)
    return model, make_optimizer(spec.optimizer, model, batch_size)


def samples_to_accuracy_once(
    spec: EstimateSpec,
    task: Task,
    batch_size: int,
    seed: int,
    reporter: Reporter | None,
    accel: Accelerator | None = None,
) -> RunOutcome:
    """Train one (batch size, seed): where its curve crossed the target (None if never), the
    best accuracy seen and the gradient noise scale measured along the way."""
    accel = accel or resolve(spec.device, spec.precision)
    model, optimizer = _prepare(spec, task, batch_size, seed, accel)
    state = train_to_target(
        model,
        optimizer,
        task,
        batch_size=batch_size,
        target_accuracy=spec.target_accuracy,
        sample_budget=spec.sample_budget,
        eval_interval_samples=spec.eval_interval_samples,
        seed=seed,
        eval_samples=spec.eval_samples,
        accel=accel,
        scaler=accel.grad_scaler(),
        measure_noise=True,
        on_eval=(
            (
                lambda s: reporter.advance(
                    s.samples,
                    f"b={batch_size} seed={seed} acc {s.accuracy:.3f}",
                    batch_size=batch_size,
                    seed=seed,
                    accuracy=s.accuracy,
                )
            )
            if reporter
            else None
        ),
    )
    best = max((acc for _s, acc in state.curve), default=0.0)
    return RunOutcome(
        samples=state.samples_to_target(spec.target_accuracy),
        best_accuracy=best,
        gradient_noise_scale=state.gradient_noise_scale(),
        grid_samples=state.samples if state.reached_target else None,
    )


def run_bytes(spec: EstimateSpec, task: Task, accel: Accelerator) -> int:
    """Device memory one run needs: a probe step at the largest batch size, plus a context."""
    batch_size = max(spec.batch_sizes)
    model, optimizer = _prepare(spec, task, batch_size, spec.seeds[0], accel)
    with peak_memory(accel) as peak:
        model.train()
        x, y = task.batch(0, batch_size, spec.seeds[0], accel.device)
        train_step(model, optimizer, x, y, accel, accel.grad_scaler())
        train_step(model, optimizer, x, y, accel, accel.grad_scaler())  # optimizer state exists
        accel.synchronize()
    task_bytes = task.nbytes if task.device.type == "cuda" else 0
    del model, optimizer, x, y
    torch.cuda.empty_cache()  # hand the probe's cached blocks back before workers start
    return peak[0] + task_bytes + CUDA_CONTEXT_BYTES


def parallel_runs(spec: EstimateSpec, task: Task, accel: Accelerator, runs: int) -> int:
    """How many runs train side by side: the flag, else what free CUDA memory holds, else 1."""
    if spec.parallel:
        return min(spec.parallel, runs)
    if not accel.is_cuda or runs == 1:
        return 1
    free_bytes, _total = torch.cuda.mem_get_info(accel.device)
    fits = int(free_bytes * FREE_MEMORY_SHARE) // max(run_bytes(spec, task, accel), 1)
    # Each process also needs a CPU core to launch its kernels.
    return max(1, min(runs, fits, os.cpu_count() or 1))


def _run_in_worker(spec_json: str, batch_size: int, seed: int, threads: int) -> RunOutcome:
    """One (batch size, seed) in a worker process (top level so it pickles)."""
    torch.set_num_threads(threads)
    spec = EstimateSpec.model_validate_json(spec_json)
    accel = resolve(spec.device, spec.precision)
    task = load_task(spec.dataset, spec.dataset_limit).to(accel.device)
    return samples_to_accuracy_once(spec, task, batch_size, seed, None, accel)


def _run_parallel(
    spec: EstimateSpec, runs: list[tuple[int, int]], workers: int, reporter: Reporter | None
) -> dict[tuple[int, int], RunOutcome]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    threads = max(1, (os.cpu_count() or 1) // workers)
    if reporter:
        reporter.start(f"estimate ({workers} runs side by side)", len(runs), parallel=workers)
    out: dict[tuple[int, int], RunOutcome] = {}
    # spawn: a forked process inherits a CUDA context it cannot use, and torch's thread pools.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {
            pool.submit(_run_in_worker, spec.model_dump_json(), b, seed, threads): (b, seed)
            for b, seed in runs
        }
        for future in as_completed(futures):
            b, seed = futures[future]
            out[(b, seed)] = future.result()
            if reporter:
                reporter.advance(len(out), f"b={b} seed={seed}", batch_size=b, seed=seed)
                reporter.event("run", batch_size=b, seed=seed,
                               samples_to_accuracy=out[(b, seed)].samples)
    return out


def estimate(spec: EstimateSpec, reporter: Reporter | None = None) -> EfficiencyVector:
    """Train every batch size (and seed) to the target; the efficiency vector of the contract."""
    configure_threads()
    accel = resolve(spec.device, spec.precision)
    task = load_task(spec.dataset, spec.dataset_limit).to(accel.device)
    runs = estimate_runs(spec.batch_sizes, spec.seeds)
    workers = parallel_runs(spec, task, accel, len(runs))
    if reporter:
        reporter.event(
            "device", device=accel.label, precision=accel.precision.value, parallel=workers
        )
    results: dict[tuple[int, int], RunOutcome] = {}
    if workers > 1:
        del task  # the workers load their own copy
        if accel.is_cuda:
            torch.cuda.empty_cache()
        results = _run_parallel(spec, runs, workers, reporter)
    else:
        for b, seed in runs:
            if reporter:
                reporter.start(
                    f"estimate b={b} seed={seed}", spec.sample_budget, batch_size=b, seed=seed
                )
            results[(b, seed)] = samples_to_accuracy_once(spec, task, b, seed, reporter, accel)
            if reporter:
                reporter.event(
                    "run", batch_size=b, seed=seed, samples_to_accuracy=results[(b, seed)].samples
                )
    vector = vector_from_runs(
        model=spec.model,
        dataset=spec.dataset,
        target_accuracy=spec.target_accuracy,
        batch_sizes=spec.batch_sizes,
        seeds=spec.seeds,
        results={run: (got.samples, got.best_accuracy) for run, got in results.items()},
        noise_scales={run: got.gradient_noise_scale for run, got in results.items()},
    )
    if not isinstance(vector, EfficiencyVector):
        raise TargetNotReachedError(spec, vector)
    return vector.model_copy(update={"device": accel.label, "precision": accel.precision.value})


def estimate_part(
    spec: EstimateSpec, index: int, tag: str, reporter: Reporter | None = None
) -> EfficiencyPart:
    """Run `index` of the estimate alone (one completion of the operator's Indexed Job): its
    part, which the operator merges with the others into the vector `estimate` would give."""
    runs = estimate_runs(spec.batch_sizes, spec.seeds)
    if not 0 <= index < len(runs):
        raise BadInputError(
            f"--run-index {index} is out of range: {len(spec.batch_sizes)} batch sizes ×"
            f" {len(spec.seeds)} seeds make runs 0 to {len(runs) - 1}"
        )
    configure_threads()
    accel = resolve(spec.device, spec.precision)
    task = load_task(spec.dataset, spec.dataset_limit).to(accel.device)
    b, seed = runs[index]
    if reporter:
        reporter.event("device", device=accel.label, precision=accel.precision.value, parallel=1)
        reporter.start(f"estimate b={b} seed={seed}", spec.sample_budget, batch_size=b, seed=seed)
    got = samples_to_accuracy_once(spec, task, b, seed, reporter, accel)
    if reporter:
        reporter.event("run", batch_size=b, seed=seed, samples_to_accuracy=got.samples)
    return EfficiencyPart(
        tag=tag, index=index, model=spec.model, dataset=spec.dataset,
        target_accuracy=spec.target_accuracy, batch_size=b, seed=seed,
        samples_to_accuracy=got.samples, best_accuracy=got.best_accuracy,
        gradient_noise_scale=got.gradient_noise_scale, device=accel.label,
        precision=accel.precision.value,
    )
