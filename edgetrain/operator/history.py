"""Recurring jobs in the cluster: the history ConfigMap (one data key per finished training).

Pure: names, bodies and decisions as data; `decide` asks for them, `reconcile` carries them out.
A finished training adds its observation with a merge patch of one key, so jobs that finish at
the same time do not overwrite each other, and a corrupt key loses no other.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from edgetrain.api.efficiency import EfficiencyVector
from edgetrain.api.history import EfficiencyObservation, entry_name, history_key, read_pool
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.api.job_status import HistoryStatus, TrainingStatus
from edgetrain.api.keys import LABEL_CACHE, LABEL_CACHE_KEY
from edgetrain.api.profile import ProfilePoint
from edgetrain.kube import Obj, now_rfc3339
from edgetrain.operator.manifests import weights_identity
from edgetrain.operator.phases import plan_candidates
from edgetrain.operator.world import Action, Create, Patch
from edgetrain.planner import Lut
from edgetrain.planner.gate import GateSettings
from edgetrain.planner.learn import (
    history_pair,
    learn,
    observation_extras,
    plan_vector,
    tilt_prior,
)
from edgetrain.planner.tilt import TiltPair


def spec_history_key(spec: PowerAwareTrainingJobSpec) -> str:
    """Observations are shared by model, target set and target accuracy."""
    return history_key(
        spec.model.architecture, spec.dataset.name, spec.dataset.limit, spec.target_accuracy
    )


def history_configmap_name(key: str) -> str:
    """The ConfigMap that holds the observations of `key`."""
    return f"edgetrain-history-{key}"


def cache_pairs(configmaps: Mapping[str, Mapping[str, str]], own: str) -> list[TiltPair]:
    """(proxy, target) tilt pairs from the other history ConfigMaps in view (each with
    observations at ≥ 2 batch sizes), for the population tilt prior."""
    pairs: list[TiltPair] = []
    prefix = history_configmap_name("")
    for name in sorted(configmaps):
        if not name.startswith(prefix) or name == own:
            continue
        pool = read_pool(configmaps[name], name.removeprefix(prefix), None, match_weights=False)
        pair = history_pair(pool, name)
        if pair is not None:
            pairs.append(pair)
    return pairs


def gate_settings(spec: PowerAwareTrainingJobSpec) -> GateSettings:
    """The job's exploration gate: recurrences it expects, its budget."""
    return GateSettings(
        expected_recurrences=spec.strategy.expected_recurrences,
        alpha=spec.strategy.exploration_budget,
    )


def plan_input(
    spec: PowerAwareTrainingJobSpec,
    prior: EfficiencyVector,
    entries: Mapping[str, str],
    job_name: str,
    luts: Mapping[str, list[ProfilePoint]] | None = None,
    configmaps: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[EfficiencyVector, HistoryStatus | None, list[str]]:
    """The vector to plan from, what status shows, and a warning per skipped entry.

    The posterior mean is gated on the profile of the device model it would plan on (`luts`:
    device model → profile points; none: no exploration).
    """
    if not spec.strategy.learn_from_history:
        return prior, None, []
    key = spec_history_key(spec)
    cm = history_configmap_name(key)
    pool = read_pool(entries, key, weights_identity(spec))
    warnings = [f"{cm}: observation {name} skipped: {why}" for name, why in pool.skipped.items()]
    learned = learn(prior, pool, key, config_map=cm,
                    tilt=tilt_prior(cache_pairs(configmaps or {}, cm)))  # fmt: skip
    mean, status = plan_vector(learned, None, spec.power_limit_w)
    model, _result, _rows = plan_candidates(spec, mean, dict(luts or {}))
    if model is None or luts is None:
        return mean, status, warnings
    vector, status = plan_vector(
        learned,
        Lut.from_points(luts[model]),
        spec.power_limit_w,
        metric=spec.strategy.power_metric,
        objective=spec.strategy.objective,
        settings=gate_settings(spec),
    )
    return vector, status, warnings


def record_actions(
    spec: PowerAwareTrainingJobSpec,
    patj: Obj,
    batch_size: int,
    training: TrainingStatus,
    reached_target: bool,
    history: HistoryStatus | None = None,
) -> list[Action]:
    """Create the history ConfigMap (409: it exists) and add this training's observation.

    Nothing is recorded when the job opted out, or when its samples span several batch sizes
    (a re-plan that changed b carries samples over: no one b's samples to target).
    """
    if not spec.strategy.learn_from_history or training.carried_samples:
        return []
    meta = patj["metadata"]
    key = spec_history_key(spec)
    cm = history_configmap_name(key)
    job = f"{meta['namespace']}.{meta['name']}.{str(meta.get('uid') or '')[:8]}"
    accuracy = training.accuracy
    observation = EfficiencyObservation(
        key=key,
        model=spec.model.architecture,
        dataset=spec.dataset.name,
        dataset_limit=spec.dataset.limit,
        target_accuracy=spec.target_accuracy,
        batch_size=batch_size,
        samples_to_accuracy=float(max(
            training.samples_to_target if reached_target and training.samples_to_target
            else training.samples, 1)),
        reached_target=reached_target,
        diverged=accuracy is not None and not math.isfinite(accuracy),
        weights=weights_identity(spec),
        seed=spec.budget.seeds[0],
        job=job,
        finished_at=now_rfc3339(),
        **observation_extras(history, training.gradient_noise_scale),
    )
    body: Obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        # Not owned by the job: the history outlives every job that adds to it.
        "metadata": {
            "name": cm,
            "namespace": meta["namespace"],
            "labels": {LABEL_CACHE: "history", LABEL_CACHE_KEY: key},
        },
        "data": {},
    }
    entry = {entry_name(job): observation.model_dump_json()}
    return [
        Create("v1", "configmaps", body),
        # Best effort: a refused patch (e.g. a ConfigMap at its 1 MiB limit, ~2,500 entries)
        # loses one observation, never the job.
        Patch("v1", "configmaps", meta["namespace"], cm, {"data": entry}, best_effort=True),
    ]

