"""The efficiency-vector contract: samples to reach the target accuracy per batch size."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
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

    @model_validator(mode="after")
    def _consistent(self) -> EfficiencyVector:
        n = len(self.batch_sizes)
        for name in ("samples_to_accuracy", "r"):
            if len(getattr(self, name)) != n:
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
