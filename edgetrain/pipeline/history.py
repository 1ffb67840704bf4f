"""Recurring jobs for `edgetrain run`: observations as files in the cache directory.

One file per finished training (`<cache>/history/<key>/<run>.json`, written atomically), so a
corrupt or foreign file is skipped with a warning and loses no other observation.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.history import (
    ENTRY_SUFFIX,
    EfficiencyObservation,
    ObservationPool,
    entry_name,
    history_key,
    read_pool,
)
from edgetrain.api.io import write_text_atomic
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.api.job_status import HistoryStatus
from edgetrain.api.training import TrainResult
from edgetrain.pipeline.dryrun import cache_root
from edgetrain.planner.history import learn
from edgetrain.workloads.progress import Reporter


def spec_history_key(spec: PowerAwareTrainingJobSpec) -> str:
    """The key under which this job's observations are shared."""
    return history_key(
        spec.model.architecture, spec.dataset.name, spec.dataset.limit, spec.target_accuracy
    )


def history_dir(key: str) -> Path:
    """Where `edgetrain run` keeps the observations of `key`."""
    return cache_root() / "history" / key


def read_entries(folder: Path) -> dict[str, str]:
    """Every entry's raw text; an unreadable file becomes text that fails parsing (skipped)."""
    entries: dict[str, str] = {}
    if not folder.is_dir():
        return entries
    for path in sorted(folder.glob(f"*{ENTRY_SUFFIX}")):
        try:
            entries[path.name] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            entries[path.name] = f"<unreadable: {exc}>"
    return entries


def plan_input(
    spec: PowerAwareTrainingJobSpec,
    prior: EfficiencyVector,
    weights_sha256: str | None,
    reporter: Reporter | None,
) -> tuple[EfficiencyVector, HistoryStatus | None]:
    """The vector to plan from: the posterior's, or the proxy's when the job opts out."""
    if not spec.strategy.learn_from_history:
        return prior, None
    key = spec_history_key(spec)
    folder = history_dir(key)
    pool: ObservationPool = read_pool(read_entries(folder), key, weights_sha256)
    for name, why in pool.skipped.items():
        if reporter:
            reporter.event("warning", message=f"history {folder / name} skipped: {why}")
    vector, status = learn(prior, pool, key, config_map=None, seed=len(pool.used))
    if reporter:
        reporter.event("history", **status.model_dump(mode="json"))
    return vector, status


def observation_of(
    spec: PowerAwareTrainingJobSpec,
    batch_size: int,
    training: TrainResult,
    weights_sha256: str | None,
    job: str,
) -> EfficiencyObservation:
    """What one finished training measured (samples: the budget spent when not reached)."""
    return EfficiencyObservation(
        key=spec_history_key(spec),
        model=spec.model.architecture,
        dataset=spec.dataset.name,
        dataset_limit=spec.dataset.limit,
        target_accuracy=spec.target_accuracy,
        batch_size=batch_size,
        samples_to_accuracy=float(max(training.samples, 1)),
        reached_target=training.reached_target,
        diverged=not math.isfinite(training.accuracy),
        weights=weights_sha256,
        seed=spec.budget.seeds[0],
        job=job,
        finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


def record(observation: EfficiencyObservation) -> Path:
    """Write one observation atomically beside the others of its key."""
    path = history_dir(observation.key) / entry_name(observation.job)
    write_text_atomic(path, observation.model_dump_json(indent=1) + "\n")
    return path
