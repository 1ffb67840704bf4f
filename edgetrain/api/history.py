"""Recurring jobs' observations: what a finished training measured about its batch size.

Each finished training records one `EfficiencyObservation` under a history key (model, target
set, target accuracy). A later job with the same key reads the pool and plans from a posterior r
(`edgetrain.planner.history`). Stored one entry per training (a file in the cache directory for
`edgetrain run`, a key of the history ConfigMap in a cluster), so a corrupt entry loses nothing
else.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: Bump when what an observation means changes; an entry of another version is foreign.
OBSERVATION_VERSION = 1
#: The data key of one observation: `<job>.json` (ConfigMap keys allow [-._a-zA-Z0-9]).
ENTRY_SUFFIX = ".json"


class EfficiencyObservation(BaseModel):
    """One finished training: samples to the target at the batch size it ran, on the target set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = OBSERVATION_VERSION
    key: str = Field(min_length=1, description="history key: model, target set, target accuracy")
    model: str = Field(min_length=1)
    dataset: str = Field(min_length=1, description="the target set")
    dataset_limit: int | None = None
    target_accuracy: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
    batch_size: Annotated[int, Field(gt=0)]
    samples_to_accuracy: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        description="samples trained until the target; the whole budget when not reached"
    )
    reached_target: bool
    diverged: bool = Field(default=False, description="the run's accuracy became NaN")
    weights: str | None = Field(description="sha256 of the starting weights; None: from scratch")
    seed: int
    job: str = Field(min_length=1, description="the job (or run) that trained it")
    finished_at: str = ""
    gradient_noise_scale: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(
        default=None, description="B_simple measured in the training, on the target set"
    )
    explored: bool = Field(default=False, description="the gate sent it off the incumbent size")
    explore_overrun: Annotated[float, Field(allow_inf_nan=False)] | None = Field(
        default=None, description="its pessimistic overrun, in incumbent trainings (the budget)"
    )
    proxy_batch_sizes: list[int] | None = Field(
        default=None, description="the proxy's batch sizes (with proxy_samples: a tilt pair)"
    )
    proxy_samples: list[float | None] | None = Field(
        default=None, description="the proxy's N(b) this job planned from"
    )


def history_key(model: str, dataset: str, dataset_limit: int | None, target: float) -> str:
    """Observations are shared by model, target set (and subset) and target accuracy."""
    payload = {"model": model, "dataset": dataset, "limit": dataset_limit, "target": target}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def entry_name(job: str) -> str:
    """A data key (and file name) for one job's observation."""
    safe = re.sub(r"[^-._a-zA-Z0-9]", "-", job)[:200] or "job"
    return safe + ENTRY_SUFFIX


class ObservationPool(BaseModel):
    """The observations a job plans from, and what was left out and why."""

    used: list[EfficiencyObservation] = Field(default_factory=list)
    excluded: dict[str, str] = Field(
        default_factory=dict, description="entry → why it is kept out (diverged, other weights)"
    )
    skipped: dict[str, str] = Field(
        default_factory=dict, description="entry → why it is unreadable (corrupt or foreign)"
    )

    def pairs(self) -> list[tuple[int, float]]:
        """(batch size, samples to target) of every used observation."""
        return [(o.batch_size, o.samples_to_accuracy) for o in self.used]

    def spent(self) -> float:
        """The pessimistic overruns the explorations among them recorded (the gate's budget)."""
        return sum(o.explore_overrun or 0.0 for o in self.used if o.explored)


def _why_unreadable(text: str) -> tuple[EfficiencyObservation | None, str]:
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at line {exc.lineno})"
    if not isinstance(data, dict):
        return None, f"not a JSON object ({type(data).__name__})"
    if data.get("version") not in (None, OBSERVATION_VERSION):
        return None, f"observation version {data.get('version')!r}, not {OBSERVATION_VERSION}"
    try:
        return EfficiencyObservation.model_validate(data), ""
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "entry"
        return None, f"{field}: {err['msg']}"


def read_pool(
    entries: Mapping[str, str], key: str, weights: str | None, *, match_weights: bool = True
) -> ObservationPool:
    """The usable observations of `key` among raw entries (name → JSON text).

    Corrupt or foreign entries (another key or version) are skipped with the reason; diverged
    runs and (unless `match_weights` is off) runs from other starting weights are excluded;
    nothing raises.
    """
    pool = ObservationPool()
    for name in sorted(entries):
        observation, why = _why_unreadable(entries[name])
        if observation is None:
            pool.skipped[name] = why
        elif observation.key != key:
            pool.skipped[name] = f"foreign: key {observation.key}, not {key}"
        elif observation.diverged:
            pool.excluded[name] = "the run diverged"
        elif match_weights and observation.weights != weights:
            pool.excluded[name] = "started from other weights"
        elif not math.isfinite(observation.samples_to_accuracy):
            pool.skipped[name] = "samples_to_accuracy is not finite"
        else:
            pool.used.append(observation)
    return pool


__all__ = [
    "ENTRY_SUFFIX",
    "OBSERVATION_VERSION",
    "EfficiencyObservation",
    "ObservationPool",
    "entry_name",
    "history_key",
    "read_pool",
]
