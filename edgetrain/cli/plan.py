"""`edgetrain plan`: choose batch size and GPU frequency under a power limit."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from edgetrain.api import (
    Objective,
    PlanPoint,
    PlanResult,
    PowerMetric,
    read_efficiency,
    read_profile,
)
from edgetrain.cli.common import exit_codes, stderr, stdout
from edgetrain.planner import Lut, PlanInputError, baseline_frequency_for_limit
from edgetrain.planner import plan as make_plan


def parse_frequency_hz(text: str) -> int:
    """'307200000', '307.2MHz' or '1.3GHz' → Hz."""
    value = text.strip().lower()
    for suffix, scale in (("ghz", 1e9), ("mhz", 1e6), ("khz", 1e3), ("hz", 1.0)):
        if value.endswith(suffix):
            value, factor = value.removesuffix(suffix), scale
            break
    else:
        factor = 1.0
    try:
        hz = float(value) * factor
    except ValueError:
        raise PlanInputError(f"'{text}' is not a frequency (e.g. 307200000 or 307.2MHz)") from None
    if not (math.isfinite(hz) and hz > 0):
        raise PlanInputError(f"'{text}' is not a positive frequency")
    return round(hz)


def parse_baseline_freqs(text: str) -> dict[float, int]:
    """'4.5:307.2MHz,7:614.4MHz,inf:921.6MHz' → {limit W: Hz}; a bare frequency applies to all."""
    out: dict[float, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        limit_text, sep, freq_text = item.rpartition(":")
        try:
            limit = float(limit_text) if sep else 0.0
        except ValueError:
            raise PlanInputError(
                f"--baseline-freqs: '{item}' should be LIMIT_W:FREQ (e.g. 4.5:307.2MHz)"
            ) from None
        out[limit] = parse_frequency_hz(freq_text)
    if not out:
        raise PlanInputError("--baseline-freqs is empty")
    return out


def _mode_text(point: PlanPoint) -> str:
    text = f"{point.gpu_freq_hz / 1e6:g}"
    if point.cpu_freq_hz or point.cpu_cores or point.emc_freq_hz:
        text += f" (cpu {point.cpu_cores or '-'}×{(point.cpu_freq_hz or 0) / 1e6:g}"
        text += f", emc {(point.emc_freq_hz or 0) / 1e6:g})"
    return text


def render_plan(result: PlanResult) -> Table:
    """The plan and its baselines as a rich table."""
    limit = "no limit" if result.power_limit_w is None else f"{result.power_limit_w:g} W"
    table = Table(
        title=f"plan under {limit} ({result.power_metric.value} power, minimise"
        f" {result.objective.value})",
        caption=f"{result.feasible_points} of {result.profiled_points} profiled points feasible;"
        " ratio = baseline cost / plan cost (oracle: on true r)",
    )
    for name in ("", "batch", "GPU MHz", "power W", "ms/sample", "r", "rel. time", "ratio"):
        table.add_column(name, justify="right" if name else "left")
    rows: list[tuple[str, PlanPoint, str]] = [("edgetrain", result, "1.00")]
    rows += [(k, v, f"{v.ratio_to_plan:.2f}") for k, v in result.baselines.items()]
    for name, p, ratio in rows:
        power = f"{p.power_w:.2f}" + ("" if p.within_limit else " (over)")
        table.add_row(
            name,
            str(p.batch_size),
            _mode_text(p),
            power,
            f"{p.time_per_sample_s * 1e3:.3f}",
            f"{p.r:.3f}",
            f"{p.relative_time * 1e3:.3f}",
            ratio,
        )
    return table


def plan(
    profile: Annotated[
        Path,
        typer.Option(
            help="Profile CSV: batch_size,gpu_freq_hz,time_per_sample_s,peak_power_w,mean_power_w"
        ),
    ],
    efficiency: Annotated[
        Path, typer.Option(help="Efficiency JSON: batch_sizes, samples_to_accuracy, r.")
    ],
    power_limit: Annotated[
        float,
        typer.Option(help="Power limit in watts; the constraint is power ≤ limit. 'inf' = none."),
    ],
    power_metric: Annotated[
        PowerMetric, typer.Option(help="Profiled power checked against the limit.")
    ] = PowerMetric.peak,
    objective: Annotated[
        Objective, typer.Option(help="time: time × r; energy: mean power × time × r.")
    ] = Objective.time,
    baseline_freqs: Annotated[
        str | None,
        typer.Option(
            help="Fixed GPU frequency of baselines B1/B2 per limit, e.g."
            " '4.5:307.2MHz,7:614.4MHz,inf:921.6MHz' (the tightest listed limit ≤ --power-limit"
            " applies) or one frequency. Default: the highest frequency safe for every batch size."
        ),
    ] = None,
    oracle_efficiency: Annotated[
        Path | None,
        typer.Option(help="Efficiency JSON measured on the target data, for the oracle baseline."),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON object (the plan contract).")
    ] = False,
) -> None:
    """Pick the batch size and GPU frequency that minimise time to accuracy under a power limit.

    Exit codes: 0 planned, 2 bad input (the message names file, row and field), 3 nothing
    feasible (one line on stderr naming the limit and the lowest profiled power).
    """
    with exit_codes():
        lut = Lut.from_points(read_profile(profile))
        vector = read_efficiency(efficiency)
        oracle = read_efficiency(oracle_efficiency) if oracle_efficiency else None
        baseline_hz = (
            baseline_frequency_for_limit(parse_baseline_freqs(baseline_freqs), power_limit)
            if baseline_freqs
            else None
        )
        result = make_plan(
            lut,
            vector,
            power_limit,
            metric=power_metric,
            objective=objective,
            baseline_freq_hz=baseline_hz,
            oracle=oracle,
        )
    for warning in result.warnings:
        stderr.print(f"warning: {warning}", style="yellow", markup=False)
    if json_output:
        typer.echo(result.model_dump_json(exclude_none=False))
    else:
        stdout.print(render_plan(result))
