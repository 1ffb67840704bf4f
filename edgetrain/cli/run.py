"""`edgetrain run job.yaml`: estimate → profile → plan → train, locally, with a report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from edgetrain.api.job import load_job
from edgetrain.cli.common import exit_codes, stdout
from edgetrain.cli.plan import render_plan
from edgetrain.workloads.progress import Reporter


def _phase(cached: bool, what: str, wall_s: float) -> str:
    return "cached" if cached else f"{what} {wall_s:.0f} s"


def run_command(
    job: Annotated[Path, typer.Argument(help="PowerAwareTrainingJob YAML (or just its spec).")],
    workdir: Annotated[
        Path | None, typer.Option(help="Twin tree and checkpoints (default: a temp folder).")
    ] = None,
    report: Annotated[Path, typer.Option(help="Folder for report.json and the plots.")] = Path(
        "edgetrain-report"
    ),
    json_progress: Annotated[
        bool | None,
        typer.Option("--json-progress/--bars", help="JSON lines (default when not a terminal)."),
    ] = None,
    device: Annotated[
        str | None,
        typer.Option(help="Override spec.compute.device: auto, cpu, cuda or cuda:N."),
    ] = None,
    precision: Annotated[
        str | None, typer.Option(help="Override spec.compute.precision: fp32, fp16, bf16.")
    ] = None,
) -> None:
    """Run a training job on this machine against a device twin (or this Jetson).

    Reuses cached efficiency vectors and profiles by their keys, prints the plan next to the
    baselines, trains at the plan, and writes a report. Simulated figures say so.
    """
    from edgetrain.pipeline.report import write_report
    from edgetrain.pipeline.run import run_job

    with exit_codes():
        spec = load_job(job)
        if device is not None or precision is not None:
            from edgetrain.cli.workloads import check_device

            chosen, prec = check_device(
                device or spec.compute.device, precision or spec.compute.precision
            )
            compute = spec.compute.model_copy(update={"device": chosen, "precision": prec})
            spec = spec.model_copy(update={"compute": compute})
        with Reporter(json_lines=json_progress) as reporter:
            outcome = run_job(spec, workdir, reporter)
            folder = write_report(outcome, report)
            reporter.event(
                "result",
                report=str(folder),
                plan=outcome.plan.model_dump(),
                training=outcome.training.model_dump(),
            )
    if reporter.json_lines:
        return
    sim = " (simulated)" if outcome.simulated else ""
    stdout.print(render_plan(outcome.plan))
    summary = Table(title=f"what training took on {outcome.device_model}{sim}")
    summary.add_column("")
    summary.add_column("value", justify="right")
    usage = outcome.training.usage
    meta = outcome.profile_metadata
    points = f"{meta.measured_points}/{meta.grid_points}"
    eff_s, prof_s = outcome.efficiency_phase.wall_s, outcome.profile_phase.wall_s
    rows = [
        ("batch size / GPU MHz", f"{outcome.plan.batch_size} / {outcome.plan.gpu_freq_hz / 1e6:g}"),
        ("reached target", "yes" if outcome.training.reached_target else "no (budget)"),
        ("trained on", f"{outcome.device} ({outcome.precision})"),
        ("samples", str(outcome.training.samples)),
        ("test accuracy", f"{outcome.training.accuracy:.3f}"),
        ("predicted time to accuracy (s)", f"{outcome.plan.predicted_seconds or float('nan'):.1f}"),
        ("device time (s)" + sim, f"{usage.device_time_s:.1f}"),
        ("energy (J)" + sim, "-" if usage.energy_j is None else f"{usage.energy_j:.1f}"),
        (
            "peak power (W)" + sim,
            "-" if usage.peak_power_w is None else f"{usage.peak_power_w:.2f}",
        ),
        ("efficiency vector", _phase(outcome.efficiency_phase.cached, "estimated in", eff_s)),
        ("profile", _phase(outcome.profile_phase.cached, f"{points} points in", prof_s)),
    ]
    for name, value in rows:
        summary.add_row(name, value)
    stdout.print(summary)
    stdout.print(f"report: {folder.resolve()}")
