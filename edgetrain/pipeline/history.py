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
from edgetrain.planner import Lut
from edgetrain.planner.gate import GateSettings
from edgetrain.planner.learn import (
    Learned,
    history_pair,
    learn,
    observation_extras,
    plan_vector,
    tilt_prior,
)
from edgetrain.planner.tilt import TiltPair
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


def cache_pairs(own: str) -> list[TiltPair]:
    """(proxy, target) tilt pairs from the other histories in the cache (each with
    observations at ≥ 2 batch sizes), for the population tilt prior."""
    pairs: list[TiltPair] = []
    root = cache_root() / "history"
    if not root.is_dir():
        return pairs
    for folder in sorted(root.iterdir()):
        if folder.name == own or not folder.is_dir():
            continue
        pool = read_pool(read_entries(folder), folder.name, None, match_weights=False)
        pair = history_pair(pool, folder.name)
        if pair is not None:
            pairs.append(pair)
    return pairs


def plan_input(
    spec: PowerAwareTrainingJobSpec,
    prior: EfficiencyVector,
    weights_sha256: str | None,
    reporter: Reporter | None,
) -> Learned | None:
    """The posterior to plan from (None when the job opts out); `plan_vector` gates it on the
    profile once there is one."""
    if not spec.strategy.learn_from_history:
        return None
    key = spec_history_key(spec)
    folder = history_dir(key)
    pool: ObservationPool = read_pool(read_entries(folder), key, weights_sha256)
    for name, why in pool.skipped.items():
        if reporter:
            reporter.event("warning", message=f"history {folder / name} skipped: {why}")
    return learn(prior, pool, key, config_map=None, tilt=tilt_prior(cache_pairs(key)))


def planning(
    spec: PowerAwareTrainingJobSpec,
    prior: EfficiencyVector,
    learned: Learned | None,
    lut: Lut | None,
    reporter: Reporter | None,
) -> tuple[EfficiencyVector, HistoryStatus | None]:
    """The vector the plan reads (the proxy's when the job opts out) and the history status."""
    if learned is None:
        return prior, None
    vector, status = plan_vector(
        learned,
        lut,
        spec.power_limit_w,
        metric=spec.strategy.power_metric,
        objective=spec.strategy.objective,
        settings=GateSettings(
            expected_recurrences=spec.strategy.expected_recurrences,
            alpha=spec.strategy.exploration_budget,
        ),
    )
    if reporter:
        reporter.event("history", **status.model_dump(mode="json"))
    return vector, status


def observation_of(
    spec: PowerAwareTrainingJobSpec,
    batch_size: int,
    training: TrainResult,
    weights_sha256: str | None,
    job: str,
    history: HistoryStatus | None = None,
) -> EfficiencyObservation:
    """What one finished training measured (samples: where the curve crossed the target; the
    budget spent when not reached)."""
    return EfficiencyObservation(
        key=spec_history_key(spec),
        model=spec.model.architecture,
        dataset=spec.dataset.name,
        dataset_limit=spec.dataset.limit,
        target_accuracy=spec.target_accuracy,
        batch_size=batch_size,
        samples_to_accuracy=float(max(
            training.samples_to_target if training.reached_target and training.samples_to_target
            else training.samples, 1)),
        reached_target=training.reached_target,
        diverged=not math.isfinite(training.accuracy),
        weights=weights_sha256,
        seed=spec.budget.seeds[0],
        job=job,
        finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **observation_extras(history, training.gradient_noise_scale),
    )


def record(observation: EfficiencyObservation) -> Path:
    """Write one observation atomically beside the others of its key."""
    path = history_dir(observation.key) / entry_name(observation.job)
    write_text_atomic(path, observation.model_dump_json(indent=1) + "\n")
    return path
