"""The efficiency-vector contract: samples to reach the target accuracy per batch size."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from edgetrain.api.errors import InputError, read_input_text
from edgetrain.api.io import write_text_atomic

# r is recomputed from samples_to_accuracy on read; a file whose r disagrees is inconsistent.
R_RELATIVE_TOLERANCE = 1e-6


class EfficiencyVector(BaseModel):
    """Batch-size efficiency `r_b = N_s,acc(b) / max_b N_s,acc(b)`, estimated on a proxy set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1)
    dataset: str = Field(min_length=1)
    target_accuracy: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
    batch_sizes: list[Annotated[int, Field(gt=0)]] = Field(min_length=1)
    samples_to_accuracy: list[Annotated[float, Field(gt=0, allow_inf_nan=False)] | None]
    r: list[Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None]
    device: str | None = Field(default=None, description="where it was trained: cpu, cuda:N")
    precision: str | None = Field(default=None, description="fp32, fp16 or bf16")
    seeds: int | None = Field(default=None, ge=1, description="seeds merged per batch size")
    gradient_noise_scale: list[Annotated[float, Field(gt=0, allow_inf_nan=False)] | None] | None = (
        Field(
            default=None,
            description="B_simple (McCandlish et al. 2018) measured on the proxy per batch size,"
            " geometric mean over seeds; null where not measured",
        )
    )

    @model_validator(mode="after")
    def _consistent(self) -> EfficiencyVector:
        n = len(self.batch_sizes)
        for name in ("samples_to_accuracy", "r", "gradient_noise_scale"):
            if getattr(self, name) is not None and len(getattr(self, name)) != n:
                raise ValueError(
                    f"{name} has {len(getattr(self, name))} entries but batch_sizes has {n}"
                )
        seen = [b for i, b in enumerate(self.batch_sizes) if b in self.batch_sizes[:i]]
        if seen:
            raise ValueError(f"batch_sizes repeats {sorted(set(seen))}")
        reached = [s for s in self.samples_to_accuracy if s is not None]
        if not reached:
            raise ValueError("no batch size reached the target accuracy (all samples are null)")
        top = max(reached)
        for i, (b, s, r) in enumerate(
            zip(self.batch_sizes, self.samples_to_accuracy, self.r, strict=True)
        ):
            if (s is None) != (r is None):
                raise ValueError(
                    f"r[{i}] (batch size {b}) must be null exactly when samples_to_accuracy is"
                )
            if s is not None and r is not None:
                expected = s / top
                if not math.isclose(r, expected, rel_tol=R_RELATIVE_TOLERANCE, abs_tol=1e-12):
                    raise ValueError(
                        f"r[{i}] (batch size {b}) is {r} but samples_to_accuracy gives"
                        f" {s} / {top} = {expected:.6g}"
                    )
        return self

    @classmethod
    def from_samples(
        cls,
        *,
        model: str,
        dataset: str,
        target_accuracy: float,
        batch_sizes: Sequence[int],
        samples_to_accuracy: Sequence[float | None],
    ) -> EfficiencyVector:
        """Build the vector from measured samples-to-accuracy, computing r."""
        reached = [s for s in samples_to_accuracy if s is not None]
        top = max(reached) if reached else 1.0
        return cls(
            model=model,
            dataset=dataset,
            target_accuracy=target_accuracy,
            batch_sizes=list(batch_sizes),
            samples_to_accuracy=list(samples_to_accuracy),
            r=[None if s is None else s / top for s in samples_to_accuracy],
        )

    def r_by_batch_size(self) -> dict[int, float]:
        """r for every batch size that reached the target."""
        return {b: r for b, r in zip(self.batch_sizes, self.r, strict=True) if r is not None}

    def samples_by_batch_size(self) -> dict[int, float]:
        """Samples to accuracy for every batch size that reached the target."""
        return {
            b: s
            for b, s in zip(self.batch_sizes, self.samples_to_accuracy, strict=True)
            if s is not None
        }


# --- one (batch size, seed) run of an estimate, and the merge of all of them ------------------


def estimate_runs(batch_sizes: Sequence[int], seeds: Sequence[int]) -> list[tuple[int, int]]:
    """The runs of an estimate, (batch size, seed), in the order both the single process and
    an Indexed Job's completions (index i = the i-th run) use."""
    return [(b, seed) for b in batch_sizes for seed in seeds]


def median_samples(runs: Sequence[int | float | None]) -> float | None:
    """Median over seeds, a miss counting as infinitely many samples; None if the median missed."""
    value = statistics.median(float("inf") if r is None else float(r) for r in runs)
    return None if value == float("inf") else value


def merged_samples(runs: Sequence[int | float | None]) -> float | None:
    """N over seeds: the geometric mean (r is a ratio, its noise multiplicative) when every run
    reached the target; with a miss, the median (a miss counting as infinitely many samples)."""
    if any(r is None for r in runs):
        return median_samples(runs)
    return geometric_mean([float(r) for r in runs if r is not None])


def geometric_mean(values: Sequence[float | None]) -> float | None:
    """Of the values given (None: not measured); None when none is."""
    given = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if len(given) <= 1:
        return given[0] if given else None  # exactly, not exp(log(v))
    return math.exp(statistics.fmean(math.log(v) for v in given))


def target_not_reached_message(
    target_accuracy: float, dataset: str, sample_budget: int, best: Mapping[int, float]
) -> str:
    """Why an estimate has no vector: no batch size reached the target (the user's budget or
    target); the same line whether one process or an Indexed Job's pods trained the runs."""
    reached = ", ".join(f"b={b}: {acc:.3f}" for b, acc in best.items())
    return (
        f"no batch size reached target accuracy {target_accuracy:g} on"
        f" {dataset!r} within {sample_budget} samples (best accuracy {reached});"
        " raise the sample budget (--sample-budget / budget.estimateSamples) or lower the"
        " target (--target-accuracy / targetAccuracy)"
    )


RunResult = tuple[float | None, float]  # samples where the curve crossed the target, best acc


def vector_from_runs(
    *,
    model: str,
    dataset: str,
    target_accuracy: float,
    batch_sizes: Sequence[int],
    seeds: Sequence[int],
    results: Mapping[tuple[int, int], RunResult],
    noise_scales: Mapping[tuple[int, int], float | None] | None = None,
) -> EfficiencyVector | dict[int, float]:
    """The efficiency vector of every run's result (`merged_samples` over seeds), with the
    gradient noise scales where measured, or, when no batch size reached the target, the best
    accuracy per batch size (for the error)."""
    samples = [merged_samples([results[(b, seed)][0] for seed in seeds]) for b in batch_sizes]
    if all(s is None for s in samples):
        return {b: max(results[(b, seed)][1] for seed in seeds) for b in batch_sizes}
    scales = None
    if noise_scales:
        scales = [geometric_mean([noise_scales.get((b, seed)) for seed in seeds])
                  for b in batch_sizes]
    return EfficiencyVector.from_samples(
        model=model,
        dataset=dataset,
        target_accuracy=target_accuracy,
        batch_sizes=batch_sizes,
        samples_to_accuracy=samples,
    ).model_copy(update={
        "seeds": len(seeds),
        "gradient_noise_scale": scales if scales and any(s is not None for s in scales) else None,
    })


class EfficiencyPart(BaseModel):
    """One run of an estimate fanned out as an Indexed Job: what pod `index` trained, published
    as key `part-<index>.json` of the estimate's parts ConfigMap; the operator merges them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tag: str = Field(min_length=1, description="<cache key>/<estimate Job uid>: parts of an"
                     " older Job of the same name are not this one's")
    index: int = Field(ge=0, description="the Job's completion index: run `index` of"
                       " estimate_runs(batch_sizes, seeds)")
    model: str = Field(min_length=1)
    dataset: str = Field(min_length=1)
    target_accuracy: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
    batch_size: int = Field(gt=0)
    seed: int
    samples_to_accuracy: float | None = Field(
        ge=0, description="where the accuracy curve crossed the target (interpolated between"
        " evaluations); null: never reached it")
    best_accuracy: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    gradient_noise_scale: float | None = Field(
        default=None, gt=0, description="B_simple measured during the run (null: not measured)")
    device: str | None = None
    precision: str | None = None


def part_key(index: int) -> str:
    """The ConfigMap key of run `index`'s part."""
    return f"part-{index}.json"


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_efficiency_json(text: str, source: str = "<efficiency>") -> EfficiencyVector:
    """Parse and validate efficiency JSON text; raise InputError naming the field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            source, f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise InputError(source, f"expected a JSON object, got {type(data).__name__}")
    try:
        return EfficiencyVector.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = _loc(tuple(err["loc"])) or None
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] not in ("value_error", "missing") and "input" in err:
            message = f"{err['input']!r}: {message}"
        raise InputError(source, message, field=field) from None


def read_efficiency(path: str | Path) -> EfficiencyVector:
    """Read an efficiency JSON file."""
    file = Path(path)
    text = read_input_text(file, hint="pass --efficiency PATH to an efficiency JSON")
    return parse_efficiency_json(text, source=str(file))


def write_efficiency(path: str | Path, vector: EfficiencyVector) -> None:
    """Write an efficiency JSON file atomically."""
    write_text_atomic(path, vector.model_dump_json(indent=2) + "\n")
