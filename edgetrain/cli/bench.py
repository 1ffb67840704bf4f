"""`edgetrain bench …`: performance measured as ratios against a baseline run alongside."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.progress import Progress
from rich.table import Table

from edgetrain.bench.planner import SELECTION_BUDGET_S, bench_planner_rows
from edgetrain.cli.common import stderr, stdout

app = typer.Typer(help="Benchmarks; each reports ratios against a baseline from the same run.")

@app.command("planner")
def bench_planner(
    batch_sizes: Annotated[int, typer.Option(help="|B|, batch sizes 4, 8, 16, …")] = 8,
    modes: Annotated[
        str, typer.Option(help="Comma-separated |F| (modes per batch size) to time.")
    ] = "12,100,1000,5000,20000",
    repeats: Annotated[int, typer.Option(min=1, help="Timed repeats per case (median).")] = 21,
    json_output: Annotated[bool, typer.Option("--json", help="JSON lines, one per case.")] = False,
) -> None:
    """Selection time vs LUT size: Algorithm 1 fast path against the exhaustive masked argmin."""
    try:
        mode_counts = [int(m) for m in modes.split(",") if m.strip()]
    except ValueError:
        stderr.print(f"error: --modes must be comma-separated integers, got '{modes}'")
        raise typer.Exit(2) from None
    with Progress(console=stderr, transient=True, disable=json_output) as progress:
        rows = bench_planner_rows(batch_sizes, mode_counts, repeats, progress)
    if json_output:
        for row in rows:
            typer.echo(json.dumps(row.model_dump()))
        return
    table = Table(
        title="planner selection time (median per select, this machine)",
        caption=f"budget {SELECTION_BUDGET_S * 1e3:g} ms per selection; speedup = exhaustive/fast;"
        " prepare = one-off monotonicity check per LUT",
    )
    for col in (
        "|B|×|F|",
        "points",
        "LUT",
        "prepare ms",
        "fast ms",
        "exhaustive ms",
        "speedup",
        "< budget",
    ):
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(
            f"{row.batch_sizes}×{row.modes}",
            str(row.points),
            "monotone" if row.monotone else "full modes",
            f"{row.prepare_s * 1e3:.3f}",
            f"{row.fast_select_s * 1e3:.3f}",
            f"{row.exhaustive_select_s * 1e3:.3f}",
            f"{row.speedup:.1f}×",
            "yes" if row.within_budget else "NO",
        )
    stdout.print(table)


@app.command("train")
def bench_train(
    models: Annotated[
        str, typer.Option(help="Comma-separated registry models.")
    ] = "resnet8-w025,resnet8,mobilenetv2-w025,charformer-small",
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = (
        "4,8,16,32,64,128"
    ),
    device: Annotated[
        str | None, typer.Option(help="Only this device (cpu, cuda, cuda:N); default cpu and CUDA.")
    ] = None,
    repeats: Annotated[int, typer.Option(min=1, help="Alternated segments per loop (median).")] = 7,
    segment: Annotated[float, typer.Option(min=0.001, help="Seconds per timed segment.")] = 0.25,
    quick: Annotated[
        bool, typer.Option(help="One small model, two batch sizes, short segments (tests).")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Samples/s of edgetrain's training loop against a plain PyTorch loop, alternated."""
    import sys

    from edgetrain.bench.train import TrainBenchRow, run_bench
    from edgetrain.cli.common import exit_codes
    from edgetrain.cli.workloads import parse_int_list
    from edgetrain.workloads.accel import resolve_device
    from edgetrain.workloads.models import model_names

    with exit_codes():
        if quick:
            models, batch_sizes, repeats, segment = "resnet8-w025", "8,32", 2, 0.02
        names = [m.strip() for m in models.split(",") if m.strip()]
        unknown = sorted(set(names) - set(model_names()))
        if unknown:
            from edgetrain.api.errors import BadInputError

            raise BadInputError(f"--models: unknown {unknown}; known: {', '.join(model_names())}")
        sizes = parse_int_list(batch_sizes, "--batch-sizes")
        devices = [str(resolve_device(device))] if device else None
        with Progress(console=stderr, transient=True, disable=json_output) as progress:
            task = progress.add_task("train loop", total=len(names) * len(sizes))

            def advance(row: TrainBenchRow) -> None:
                progress.advance(task)
                progress.update(task, description=f"{row.model} b={row.batch_size}")

            result = run_bench(
                names,
                sizes,
                devices=devices,
                repeats=repeats,
                segment_s=segment,
                dataset_limit=2000 if quick else None,
                command="edgetrain " + " ".join(sys.argv[1:]),
                on_row=advance,
            )
    if json_output:
        typer.echo(result.model_dump_json())
        return
    table = Table(
        title=f"training loop throughput, {result.machine}",
        caption=f"ratio = median of {repeats} paired ratios edgetrain / plain loop (alternated"
        " segments);"
        f" goal ≥ {result.target_ratio}",
    )
    for col in ("device", "model", "batch", "edgetrain samples/s", "plain samples/s", "ratio"):
        table.add_column(col, justify="right")
    for row in result.rows:
        style = "" if row.ratio >= result.target_ratio else "bold red"
        table.add_row(
            row.device,
            row.model,
            str(row.batch_size),
            f"{row.edgetrain_samples_per_s:,.0f}",
            f"{row.plain_samples_per_s:,.0f}",
            f"{row.ratio:.3f}",
            style=style,
        )
    for missing in result.unmeasured_devices:
        table.add_row(missing, "—", "—", "not measured", f"(no {missing} here)", "—")
    stdout.print(table)
