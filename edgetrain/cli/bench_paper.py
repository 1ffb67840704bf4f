"""`edgetrain bench paper`: the first paper's comparison (Tables 2–4, Figure 5) on device twins."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from edgetrain.bench.paper import BenchConfig, Scale, config_for, render_markdown, run_bench
from edgetrain.cli.bench import app as bench_app
from edgetrain.cli.common import exit_codes, stderr
from edgetrain.workloads.progress import Reporter


def _parse_seeds(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        seeds = []
    if not seeds:
        stderr.print(f"error: --seeds must be comma-separated integers, got '{text}'")
        raise typer.Exit(2)
    return seeds


@bench_app.command("paper")
def bench_paper(
    scale: Annotated[
        Scale,
        typer.Option(
            help="small: a toy (~10 min here); cpu: the paper's method and shapes, sized for a"
            " 2-core CPU (≤ 90 min cold, seconds cached); paper: the paper's setup (a GPU)."
        ),
    ] = Scale.small,
    output: Annotated[
        Path | None,
        typer.Option(
            help="Markdown table to write (default docs/benchmarks/paper/<scale>.md); the"
            " results JSON (.json) and the figure (.png) go beside it."
        ),
    ] = None,
    seeds: Annotated[
        str | None, typer.Option(help="Comma-separated seeds (default: the scale's).")
    ] = None,
    config_file: Annotated[
        Path | None,
        typer.Option("--config", help="A BenchConfig JSON to run instead of --scale."),
    ] = None,
    threads: Annotated[int, typer.Option(min=1, help="PyTorch threads per training process.")] = 1,
    jobs: Annotated[
        int, typer.Option(min=1, help="Training processes side by side (default: up to 2 cores).")
    ] = min(2, os.cpu_count() or 1),
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the full result as JSON on stdout.")
    ] = False,
    device: Annotated[
        str, typer.Option(help="Where estimates train: auto (CUDA when present), cpu, cuda:N.")
    ] = "auto",
    synthetic_seeds: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Synthetic seeds of the recurring harness (default: the configuration's 500;"
            " 0 skips it).",
        ),
    ] = None,
    reevaluate_from: Annotated[
        Path | None,
        typer.Option(
            "--reevaluate",
            help="A recorded results JSON (e.g. docs/benchmarks/paper/cpu.json): recompute the"
            " comparison from its measured N(b), no training; the run's fields stay the"
            " recorded run's (with --config, only its `recurring`, `interpolated` and `seeds`"
            " settings are used).",
        ),
    ] = None,
) -> None:
    """Time to accuracy of B1, B2, edgetrain and the oracle (real ML, simulated device)."""
    with exit_codes():
        parsed = _parse_seeds(seeds)
        if config_file is not None:
            config = BenchConfig.model_validate_json(config_file.read_text())
            if parsed is not None:
                config = config.model_copy(update={"seeds": parsed})
        else:
            config = config_for(scale, parsed)
        from edgetrain.workloads.accel import resolve_device

        resolve_device(device)  # a device not present here: exit 2 before any work
        config = config.model_copy(update={"device": device.strip().lower()})
        command = shlex.join(["edgetrain", *sys.argv[1:]])
        if reevaluate_from is not None:
            from edgetrain.api.errors import read_input_text
            from edgetrain.bench.paper import read_recorded, reevaluate

            text = read_input_text(reevaluate_from, hint="pass --reevaluate a results JSON")
            recorded = read_recorded(text)
            if config_file is not None:
                # Only what needs no training may change: the recurring column's settings, where
                # N is read (interpolated, where recorded) and which of the recorded seeds count.
                update = {"recurring": config.recurring, "interpolated": config.interpolated,
                          "seeds": config.seeds}  # fmt: skip
                recorded = recorded.model_copy(
                    update={"config": recorded.config.model_copy(update=update)}
                )
            result = reevaluate(recorded, command=command, jobs=jobs,
                                synthetic_seeds=synthetic_seeds)  # fmt: skip
            config = recorded.config
        else:
            # With --json, progress lines go to stderr so stdout stays one JSON document.
            with Reporter(stream=sys.stderr if json_output else None) as reporter:
                result = run_bench(config, reporter, command=command, threads=threads, jobs=jobs,
                                   synthetic_seeds=synthetic_seeds)  # fmt: skip
        if output is None:
            output = Path("docs/benchmarks/paper") / f"{config.scale}.md"
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(render_markdown(result))
        output.with_suffix(".json").write_text(result.summary().model_dump_json(indent=1) + "\n")
        from edgetrain.bench.paper.plot import write_plot, write_posterior_plot

        write_plot(result, output.with_suffix(".png"))
        # docs/planner.md's figure: N(b) of the proxy, the posterior and the target.
        write_posterior_plot(result, output.with_name(f"{output.stem}-posterior.png"))
        if json_output:
            typer.echo(result.model_dump_json())
        else:
            stderr.print(
                f"wrote {output} ({len(result.summaries)} rows; {result.estimates_run} trainings"
                f" run, {result.estimates_cached} cached; {result.wall_s:.0f} s)"
            )
