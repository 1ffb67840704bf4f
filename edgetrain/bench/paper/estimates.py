"""Samples to accuracy from real PyTorch training, cached per (workload, data set, seed)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from edgetrain.bench.paper.config import CACHE_VERSION, BenchConfig, DatasetRef, WorkloadConfig
from edgetrain.bench.paper.results import EstimateRecord
from edgetrain.workloads.progress import Reporter


def cache_dir() -> Path:
    """`$EDGETRAIN_CACHE_DIR/bench` or `~/.cache/edgetrain/bench`."""
    env = os.environ.get("EDGETRAIN_CACHE_DIR")
    return (Path(env) if env else Path.home() / ".cache" / "edgetrain") / "bench"


def estimate_key(workload: WorkloadConfig, dataset: DatasetRef, seed: int) -> str:
    """Cache key: model, data set (and subset), target, batch sizes, optimizer, budget, seed."""
    payload = {
        "model": workload.model,
        "dataset": dataset.name,
        "limit": dataset.limit,
        "target": dataset.target_accuracy,
        "batch_sizes": workload.batch_sizes,
        "optimizer": workload.optimizer.model_dump(mode="json"),
        "budget": workload.sample_budget,
        "eval_interval": workload.eval_interval_samples,
        "eval_samples": workload.eval_samples,
        "seed": seed,
        "version": CACHE_VERSION,
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
    return f"{workload.model}-{dataset.name}-s{seed}-{digest}"


def run_estimate(
    workload: WorkloadConfig,
    dataset: DatasetRef,
    seed: int,
    reporter: Reporter | None,
    device: str = "auto",
) -> EstimateRecord:
    """Train every batch size of `workload` on `dataset` with one seed (real PyTorch)."""
    from edgetrain.api.workload_spec import EstimateSpec
    from edgetrain.workloads.accel import resolve
    from edgetrain.workloads.estimate import samples_to_accuracy_once
    from edgetrain.workloads.training import load_task

    started = time.monotonic()
    spec = EstimateSpec(
        model=workload.model,
        dataset=dataset.name,
        dataset_limit=dataset.limit,
        batch_sizes=workload.batch_sizes,
        target_accuracy=dataset.target_accuracy,
        optimizer=workload.optimizer,
        sample_budget=workload.sample_budget,
        eval_interval_samples=workload.eval_interval_samples,
        eval_samples=workload.eval_samples,
        seeds=[seed],
        device=device,
    )
    accel = resolve(device)
    task = load_task(dataset.name, dataset.limit).to(accel.device)
    samples: list[float | None] = []
    crossing: list[float | None] = []
    noise: list[float | None] = []
    for b in workload.batch_sizes:
        if reporter:
            reporter.start(
                f"{workload.model} on {dataset.name} b={b} seed={seed}",
                workload.sample_budget,
                model=workload.model,
                dataset=dataset.name,
                batch_size=b,
                seed=seed,
            )
        got = samples_to_accuracy_once(spec, task, b, seed, reporter, accel)
        samples.append(None if got.grid_samples is None else float(got.grid_samples))
        crossing.append(got.samples)
        noise.append(got.gradient_noise_scale)
    return EstimateRecord(
        model=workload.model,
        dataset=dataset.name,
        dataset_limit=dataset.limit,
        target_accuracy=dataset.target_accuracy,
        batch_sizes=list(workload.batch_sizes),
        optimizer=workload.optimizer,
        sample_budget=workload.sample_budget,
        eval_interval_samples=workload.eval_interval_samples,
        eval_samples=workload.eval_samples,
        seed=seed,
        samples_to_accuracy=samples,
        crossing_samples=crossing,
        gradient_noise_scale=noise,
        wall_s=time.monotonic() - started,
    )


def cached_estimate(
    workload: WorkloadConfig,
    dataset: DatasetRef,
    seed: int,
    reporter: Reporter | None,
    device: str = "auto",
) -> tuple[EstimateRecord, bool]:
    """The estimate from the cache, or trained now and cached; and whether it was cached."""
    path = cache_dir() / f"{estimate_key(workload, dataset, seed)}.json"
    if path.is_file():
        try:
            return EstimateRecord.model_validate_json(path.read_text()), True
        except ValueError:
            pass  # corrupt entry: train again and overwrite
    record = run_estimate(workload, dataset, seed, reporter, device)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(record.model_dump_json(indent=1))
    os.replace(tmp, path)
    return record, False


def _estimate_worker(
    workload_json: str, dataset_json: str, seed: int, threads: int, device: str = "auto"
) -> tuple[EstimateRecord, bool]:
    """One cached estimate in a worker process (top level so it pickles)."""
    import torch

    torch.set_num_threads(threads)
    workload = WorkloadConfig.model_validate_json(workload_json)
    dataset = DatasetRef.model_validate_json(dataset_json)
    return cached_estimate(workload, dataset, seed, None, device)


def estimate_all(
    config: BenchConfig, reporter: Reporter | None, *, threads: int = 1, jobs: int = 1
) -> tuple[dict[str, EstimateRecord], int, float]:
    """Every (workload, data set, seed) estimate by its cache key; trainings run and their time.

    With `jobs` > 1, single-threaded worker processes train side by side: on a small CPU two
    processes use two cores better than one process with two threads.
    """
    import torch

    # One thread per process: on a shared 2-core machine two threads oversubscribe badly.
    torch.set_num_threads(threads)
    todo: dict[str, tuple[WorkloadConfig, DatasetRef, int]] = {}
    for w in config.workloads:
        for ref in w.datasets:
            for seed in config.seeds:
                todo.setdefault(estimate_key(w, ref, seed), (w, ref, seed))
    estimates: dict[str, EstimateRecord] = {}
    ran, training_s = 0, 0.0

    def done(key: str, record: EstimateRecord, was_cached: bool) -> None:
        nonlocal ran, training_s
        estimates[key] = record
        if not was_cached:
            ran += 1
            training_s += record.wall_s
        if reporter:
            reporter.event(
                "estimate",
                model=record.model,
                dataset=record.dataset,
                seed=record.seed,
                cached=was_cached,
                samples_to_accuracy=record.samples_to_accuracy,
            )
            if jobs > 1:
                reporter.advance(len(estimates), f"{record.model} {record.dataset} s{record.seed}")

    if jobs <= 1:
        for key, (w, ref, seed) in todo.items():
            done(key, *cached_estimate(w, ref, seed, reporter, config.device))
        return estimates, ran, training_s

    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    if reporter:
        reporter.start(f"estimates ({jobs} processes)", len(todo))
    # spawn: a forked PyTorch process can deadlock on its thread pools.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {
            pool.submit(
                _estimate_worker,
                w.model_dump_json(),
                ref.model_dump_json(),
                seed,
                threads,
                config.device,
            ): key
            for key, (w, ref, seed) in todo.items()
        }
        for future in as_completed(futures):
            done(futures[future], *future.result())
    # Completion order varies between runs; the table lists estimates in configuration order.
    return {key: estimates[key] for key in todo}, ran, training_s
