"""The profile (LUT) contract: one CSV row per measured (batch size, power mode) point."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from edgetrain.api.errors import InputError, read_input_text
from edgetrain.api.io import write_text_atomic

PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
PositiveWatts = Annotated[float, Field(gt=0, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(gt=0)]


class ProfilePoint(BaseModel):
    """Time and power of training at one batch size and power mode (one CSV row)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_size: PositiveInt
    gpu_freq_hz: PositiveInt
    time_per_sample_s: PositiveSeconds
    peak_power_w: PositiveWatts
    mean_power_w: PositiveWatts
    # Full power modes (Orin-class boards); absent on GPU-frequency-only profiles.
    cpu_freq_hz: PositiveInt | None = None
    cpu_cores: PositiveInt | None = None
    emc_freq_hz: PositiveInt | None = None

    @model_validator(mode="after")
    def _mean_not_above_peak(self) -> ProfilePoint:
        # A mean over samples can never exceed their maximum; if it does the columns are swapped.
        if self.mean_power_w > self.peak_power_w * (1 + 1e-9):
            raise ValueError(
                f"mean_power_w ({self.mean_power_w}) is above peak_power_w ({self.peak_power_w});"
                " are the two columns swapped?"
            )
        return self

    @property
    def mode(self) -> tuple[int, int, int, int]:
        """The power mode as a sortable key: GPU frequency first, then CPU, cores, memory."""
        return (self.gpu_freq_hz, self.cpu_freq_hz or 0, self.cpu_cores or 0, self.emc_freq_hz or 0)


REQUIRED_COLUMNS: tuple[str, ...] = tuple(
    name for name, info in ProfilePoint.model_fields.items() if info.is_required()
)
MODE_COLUMNS: tuple[str, ...] = tuple(
    name for name, info in ProfilePoint.model_fields.items() if not info.is_required()
)
PROFILE_HEADER = ",".join(REQUIRED_COLUMNS)


def _row_error(source: str, line: int, exc: ValidationError, row: dict[str, str]) -> InputError:
    err = exc.errors()[0]
    field = str(err["loc"][0]) if err["loc"] else None
    value = row.get(field, "") if field else ""
    message = err["msg"]
    if field is not None:
        message = f"{value!r}: {message}"
    return InputError(source, message, row=line, field=field)


def parse_profile_csv(text: str, source: str = "<profile>") -> list[ProfilePoint]:
    """Parse and validate profile CSV text; raise InputError naming the row and field."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or not any(cell.strip() for cell in header):
        raise InputError(
            source, "the file is empty", hint=f"expected the header '{PROFILE_HEADER}'"
        )
    columns = [cell.strip() for cell in header]
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise InputError(
            source,
            f"missing required column(s) {', '.join(missing)}",
            row=1,
            hint=f"the header must contain '{PROFILE_HEADER}'",
        )
    extra = [c for c in columns if c not in REQUIRED_COLUMNS and c not in MODE_COLUMNS]
    if extra:
        raise InputError(
            source,
            f"unknown column(s) {', '.join(extra)}",
            row=1,
            hint=f"allowed: {', '.join(REQUIRED_COLUMNS + MODE_COLUMNS)}",
        )
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        raise InputError(source, f"column(s) {', '.join(repeated)} appear twice", row=1)

    points: list[ProfilePoint] = []
    first_line_of: dict[tuple[int, tuple[int, int, int, int]], int] = {}
    for line, cells in enumerate(reader, start=2):
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) != len(columns):
            raise InputError(
                source, f"has {len(cells)} values, the header has {len(columns)}", row=line
            )
        row = {name: cell.strip() for name, cell in zip(columns, cells, strict=True)}
        values: dict[str, Any] = {
            k: v for k, v in row.items() if not (k in MODE_COLUMNS and v == "")
        }
        for name, value in values.items():
            # pydantic accepts "nan"/"inf" before the finiteness check; name them plainly.
            if value.lower().lstrip("+-") in {"nan", "inf", "infinity"}:
                raise InputError(source, f"{value!r} is not a finite number", row=line, field=name)
        try:
            point = ProfilePoint.model_validate(values)
        except ValidationError as exc:
            raise _row_error(source, line, exc, row) from None
        key = (point.batch_size, point.mode)
        if key in first_line_of:
            raise InputError(
                source,
                f"duplicate point batch_size={point.batch_size}, gpu_freq_hz={point.gpu_freq_hz}"
                f" (first at row {first_line_of[key]})",
                row=line,
                hint="keep one row per measured point",
            )
        first_line_of[key] = line
        points.append(point)
    if not points:
        raise InputError(source, "has a header but no data rows")
    return points


def read_profile(path: str | Path) -> list[ProfilePoint]:
    """Read a profile CSV file."""
    file = Path(path)
    text = read_input_text(file, hint="pass --profile PATH to a profile CSV")
    return parse_profile_csv(text, source=str(file))


def format_profile_csv(points: Iterable[ProfilePoint]) -> str:
    """Render points as profile CSV; mode columns appear only when some point has them."""
    rows = list(points)
    mode_cols = [c for c in MODE_COLUMNS if any(getattr(p, c) is not None for p in rows)]
    columns: Sequence[str] = (*REQUIRED_COLUMNS, *mode_cols)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for p in rows:
        writer.writerow(["" if getattr(p, c) is None else _fmt(getattr(p, c)) for c in columns])
    return out.getvalue()


def _fmt(value: int | float) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"refusing to write non-finite value {value}")
        return repr(value)
    return str(value)


def write_profile(path: str | Path, points: Iterable[ProfilePoint]) -> None:
    """Write a profile CSV atomically."""
    write_text_atomic(path, format_profile_csv(points))


class ProfileMetadata(BaseModel):
    """Sidecar of a profile CSV (`<name>.meta.json`): where and how it was measured."""

    model_config = ConfigDict(extra="forbid")

    device_model: str
    l4t: str | None
    model: str
    input_shape: tuple[int, ...]
    dataset: str
    batch_sizes: list[int]
    gpu_freqs_hz: list[int]
    strategy: str
    power_limit_w: float | None
    power_metric: str
    minibatches: int
    sample_interval_s: float
    measured_points: int
    grid_points: int
    duration_s: float
    simulated: bool
    device: str | None = None  # where the minibatches ran: cpu, cuda:N (None: older files)
    precision: str | None = None


def metadata_path(profile_path: str | Path) -> Path:
    """Where the sidecar of a profile CSV lives."""
    path = Path(profile_path)
    return path.with_name(path.stem + ".meta.json")


def write_profile_metadata(profile_path: str | Path, meta: ProfileMetadata) -> None:
    """Write the sidecar atomically."""
    write_text_atomic(metadata_path(profile_path), meta.model_dump_json(indent=2) + "\n")


def read_profile_metadata(profile_path: str | Path) -> ProfileMetadata | None:
    """The sidecar of a profile CSV, if present."""
    path = metadata_path(profile_path)
    return ProfileMetadata.model_validate_json(path.read_text()) if path.is_file() else None
