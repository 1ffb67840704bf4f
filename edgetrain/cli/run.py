"""`edgetrain run job.yaml`: estimate → profile → plan → train, locally, with a report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from edgetrain.api.errors import InputError
from edgetrain.api.job import PowerAwareTrainingJobSpec, load_job
from edgetrain.cli.common import exit_codes, stdout
from edgetrain.cli.plan import render_plan
from edgetrain.pipeline.dryrun import dry_run as plan_dry_run
from edgetrain.pipeline.validate import check_output_path, validate_job
from edgetrain.workloads.progress import Reporter


def _phase(cached: bool, what: str, wall_s: float) -> str:
    return "cached" if cached else f"{what} {wall_s:.0f} s"


def _is_manifest(path: Path) -> bool:
    """A whole PowerAwareTrainingJob (fields under spec.) rather than a bare spec."""
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return isinstance(data, dict) and "kind" in data


def _print_dry_run(spec: PowerAwareTrainingJobSpec) -> None:
    table = Table(title=f"dry run: {spec.model.architecture} on {spec.dataset.name}"
                  f" via {spec.placement.device} (nothing trained)")
    for col in ("phase", "cache", "key", "samples to train (at most)"):
        table.add_column(col, justify="right" if col.startswith("samples") else "left")
    phases = plan_dry_run(spec)
    for p in phases:
        cache = "hit" if p.cached else "miss" if p.key else "-"
        if p.phase == "estimate" and not p.key:
            cache = "after pretrain"  # the key includes the weights' hash
        table.add_row(p.phase, cache, p.key or "-", f"{p.samples_to_train:,}")
    stdout.print(table)
    for p in phases:
        if p.path:
            stdout.print(f"{p.phase}: {p.path}", markup=False, soft_wrap=True)
    total = sum(p.samples_to_train for p in phases)
    stdout.print(f"at most {total:,} samples to train in all", markup=False)


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
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Check the job, print the phases, cache hits and work; train nothing."
        ),
    ] = False,
    profile_window: Annotated[
        float,
        typer.Option(
            min=0.01,
            help="Seconds of each power window while profiling: two must agree before a point"
            " is measured over one more (`edgetrain profile --stabilize-window/--min-window`).",
        ),
    ] = 1.0,
) -> None:
    """Run a training job on this machine against a device twin (or this Jetson).

    Reuses cached efficiency vectors and profiles by their keys, prints the plan next to the
    baselines, trains at the plan, and writes a report. Simulated figures say so.
    """
    with exit_codes():
        spec = load_job(job)
        validate_job(spec, job, prefix="spec." if _is_manifest(job) else "")
        check_output_path(report, "--report", folder=True)
        if workdir is not None:
            check_output_path(workdir, "--workdir", folder=True)
        if device is not None or precision is not None:
            from edgetrain.cli.workloads import check_device

            chosen, prec = check_device(
                device or spec.compute.device, precision or spec.compute.precision
            )
            compute = spec.compute.model_copy(update={"device": chosen, "precision": prec})
            spec = spec.model_copy(update={"compute": compute})
        if dry_run:
            _print_dry_run(spec)
            return
        # Imported after validation: torch takes seconds to load, a typo should not wait for it.
        from edgetrain.pipeline.report import write_report
        from edgetrain.pipeline.run import run_job
        from edgetrain.workloads.estimate import TargetNotReachedError

        with Reporter(json_lines=json_progress) as reporter:
            try:
                outcome = run_job(spec, workdir, reporter, profile_window_s=profile_window)
            except TargetNotReachedError as exc:
                raise InputError(job, str(exc)) from None  # the job file is what to edit
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
    if outcome.history is not None:
        from edgetrain.pipeline.report import history_summary

        rows += history_summary(outcome.history)
    for name, value in rows:
        summary.add_row(name, value)
    stdout.print(summary)
    stdout.print(f"report: {folder.resolve()}")
