"""An estimate fanned out over GPU servers: its parallelism, and the verdict on its parts (pure).

The estimate Job is Indexed: completion i trains run i of `estimate_runs(batch sizes, seeds)`
and publishes one `EfficiencyPart` as key `part-<i>.json` of the parts ConfigMap
`<job>-estimate-<n>-parts`. `parts_verdict` decides from that ConfigMap and the Job's state
whether to merge the parts into the vector (the same one a single `edgetrain estimate`
computes), to wait, or to count a failed attempt; `decide` only acts on it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError

from edgetrain.api.efficiency import (
    EfficiencyPart,
    EfficiencyVector,
    RunResult,
    estimate_runs,
    target_not_reached_message,
    vector_from_runs,
)
from edgetrain.api.job import PowerAwareTrainingJobSpec
from edgetrain.operator import roles
from edgetrain.operator.phases import NodeInfo
from edgetrain.operator.settings import OperatorSettings

_PART_KEY = re.compile(r"^part-(\d+)\.json$")


def parts_configmap_name(estimate_job_name: str) -> str:
    """The parts ConfigMap of one estimate Job (one per attempt, as the Job's name)."""
    return f"{estimate_job_name}-parts"


def parts_complete(data: Mapping[str, str], job: Mapping[str, object]) -> bool:
    """Every completion of the estimate Job `job` has a part key in `data` (what wakes the
    job: one wake-up at the last part; `parts_verdict` then checks each part)."""
    spec = job.get("spec")
    completions = spec.get("completions") if isinstance(spec, Mapping) else None
    total = int(completions) if isinstance(completions, int) else 1
    return sum(1 for k in data if _PART_KEY.match(k)) >= total


def part_tag(key: str, job_uid: str) -> str:
    """What every part of the estimate Job `job_uid` of cache key `key` carries."""
    return f"{key}/{job_uid}"


def runs_of(spec: PowerAwareTrainingJobSpec) -> list[tuple[int, int]]:
    """The (batch size, seed) runs of the job's estimate: one completion each."""
    return estimate_runs(spec.batch_sizes, spec.budget.seeds)


def requests_gpus(spec: PowerAwareTrainingJobSpec, settings: OperatorSettings) -> bool:
    """Whether each estimate pod requests GPUs from the server's device plugin."""
    return settings.estimate_gpus > 0 and spec.compute.device != "cpu"


def server_capacity(
    servers: Sequence[NodeInfo], spec: PowerAwareTrainingJobSpec, settings: OperatorSettings
) -> int:
    """How many estimate pods the Ready GPU servers hold at once: the GPUs each allocates over
    the GPUs a pod requests, summed (one pod per server when the pods request none)."""
    # The operator lists nodes by the serverSelector alone: only GPU servers count here.
    ready = [s for s in roles.servers(servers, settings) if s.schedulable]
    if not requests_gpus(spec, settings):
        return len(ready)
    return sum(s.allocatable_gpus // settings.estimate_gpus for s in ready)


def parallelism(
    servers: Sequence[NodeInfo], spec: PowerAwareTrainingJobSpec, settings: OperatorSettings
) -> int:
    """Pods of the estimate at once: the chart's bound, the runs, and what the servers fit
    (at least 1: with no server Ready the pod waits, and the job says why)."""
    runs = len(runs_of(spec))
    return max(1, min(settings.estimate_parallelism, runs, server_capacity(servers, spec,
                                                                            settings)))


@dataclass(frozen=True)
class PartsVerdict:
    """What the parts say: `merge` (every run is in: `vector`, or `message` when no batch size
    reached the target), `wait` (runs are still training), or `failed` (the Job ended without
    every part; `message` says which are missing)."""

    kind: Literal["merge", "wait", "failed"]
    done: int
    total: int
    vector: EfficiencyVector | None = None
    message: str = ""
    skipped: tuple[str, ...] = ()  # "part-3.json: why", for parts that are not this Job's

    @property
    def progress(self) -> str:
        """`k of n runs done`, and what was skipped."""
        text = f"{self.done} of {self.total} runs done"
        if self.skipped:
            text += f" (skipped {'; '.join(self.skipped)})"
        return text


def _check(key: str, text: str, tag: str, spec: PowerAwareTrainingJobSpec,
           runs: Sequence[tuple[int, int]]) -> EfficiencyPart | str:
    """The part under `key`, or why it is not one of this Job's runs."""
    match = _PART_KEY.match(key)
    if match is None:
        return "not a part key"
    index = int(match.group(1))
    if index >= len(runs):
        return f"index {index} is beyond the {len(runs)} runs"
    try:
        part = EfficiencyPart.model_validate_json(text)
    except ValidationError as exc:
        return f"unreadable ({exc.errors()[0]['msg']})"
    if part.tag != tag:
        return f"of another estimate ({part.tag})"  # a Job of the same name before this one
    if part.index != index:
        return f"says it is run {part.index}"
    if (part.batch_size, part.seed) != runs[index]:
        return (f"trained b={part.batch_size} seed={part.seed}, run {index} is"
                f" b={runs[index][0]} seed={runs[index][1]}")
    if (part.model, part.dataset) != (spec.model.architecture, spec.proxy_dataset.name) or (
            part.target_accuracy != spec.target_accuracy):
        return (f"is for {part.model} on {part.dataset} at {part.target_accuracy:g}, not this"
                " job's estimate")
    return part


def _joined(values: Sequence[str | None]) -> str | None:
    seen = sorted({v for v in values if v})
    return ", ".join(seen) if seen else None


def parts_verdict(
    data: Mapping[str, str] | None,
    *,
    tag: str,
    spec: PowerAwareTrainingJobSpec,
    job_state: str,
) -> PartsVerdict:
    """Merge, wait or fail, from the parts ConfigMap's data and the Job's state (`running`,
    `succeeded`, `failed`: `phases.job_outcome`). Every part in wins over the Job's state: the
    runs are what the vector needs, whatever became of the Job afterwards."""
    runs = runs_of(spec)
    parts: dict[int, EfficiencyPart] = {}
    skipped: list[str] = []
    for key in sorted(data or {}):
        checked = _check(key, (data or {})[key], tag, spec, runs)
        if isinstance(checked, str):
            skipped.append(f"{key}: {checked}")
        else:
            parts[checked.index] = checked
    total, done = len(runs), len(parts)
    if done < total:
        missing = [i for i in range(total) if i not in parts]
        if job_state == "running":
            return PartsVerdict("wait", done, total, skipped=tuple(skipped))
        shown = ", ".join(f"part-{i}.json" for i in missing[:8])
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        message = f"{done} of {total} runs published; missing {shown}{more}"
        if skipped:
            message += f"; skipped {'; '.join(skipped)}"
        return PartsVerdict("failed", done, total, message=message, skipped=tuple(skipped))
    results: dict[tuple[int, int], RunResult] = {
        (p.batch_size, p.seed): (p.samples_to_accuracy, p.best_accuracy) for p in parts.values()}
    merged = vector_from_runs(
        model=spec.model.architecture, dataset=spec.proxy_dataset.name,
        target_accuracy=spec.target_accuracy, batch_sizes=spec.batch_sizes,
        seeds=spec.budget.seeds, results=results,
        noise_scales={(p.batch_size, p.seed): p.gradient_noise_scale for p in parts.values()})
    if not isinstance(merged, EfficiencyVector):
        message = target_not_reached_message(spec.target_accuracy, spec.proxy_dataset.name,
                                             spec.budget.estimate_samples, merged)
        return PartsVerdict("merge", done, total, message=message, skipped=tuple(skipped))
    ordered = [parts[i] for i in range(total)]
    vector = merged.model_copy(update={"device": _joined([p.device for p in ordered]),
                                       "precision": _joined([p.precision for p in ordered])})
    return PartsVerdict("merge", done, total, vector=vector, skipped=tuple(skipped))
