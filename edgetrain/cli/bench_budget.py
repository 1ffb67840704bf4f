"""`edgetrain bench budget`: a site's jobs under one cap: allocator vs equal split vs FCFS."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from edgetrain.cli.bench import app as bench_app
from edgetrain.cli.common import stderr, stdout


@bench_app.command("budget")
def bench_budget_command(
    jobs: Annotated[int, typer.Option(min=1, max=40, help="Jobs on the site.")] = 6,
    nodes: Annotated[int, typer.Option(min=1, max=40, help="Nodes (boards cycle Nano, TX2 NX,"
                                       " Orin Nano).")] = 3,
    cap: Annotated[float | None, typer.Option(min=0.01, help="Site cap (W); default: 30 % of"
                                              " the way from cheapest to own-limit plans.")] = None,
    figure: Annotated[Path | None, typer.Option(help="Write the figure (PNG) here.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
    cluster: Annotated[bool, typer.Option(
        "--cluster", help="Live: a local cluster set up the README's way (run `make"
        " images-core` first), three twin Nanos under one PowerBudget, jobs arriving 1-3 s"
        " apart in rounds; every pod watched, every node agent read.")] = False,
    rounds: Annotated[int, typer.Option(min=1, help="--cluster: rounds of three jobs.")] = 3,
    hog_every: Annotated[int, typer.Option(
        min=0, help="--cluster: every N-th round beside a CPU hog (0: none).")] = 2,
) -> None:
    """The allocator, an equal split and FCFS at each job's own limit, same jobs, one run
    (every figure simulated on device twins); or, with --cluster, the cap's promise measured
    from outside on a live cluster."""
    if cluster:
        _live(rounds, 9.0 if cap is None else cap, hog_every, json_output)
        return
    from edgetrain.bench.budget import bench_budget, plot_budget

    with stderr.status("simulating the site on twins", spinner="dots"):
        result = bench_budget(jobs, nodes, cap)
    if figure is not None:
        plot_budget(result, figure)
    if json_output:
        typer.echo(result.model_dump_json(exclude={"policies": {"__all__": {"timeline"}}}))
        return
    table = Table(title=f"{result.jobs} jobs, {result.nodes} nodes, cap {result.cap_w:g} W"
                  " (simulated)",
                  caption=f"summed TTA ratio vs equal split {result.sum_tta_ratio_vs_equal_split}"
                  f", makespan ratio {result.makespan_ratio_vs_equal_split}")
    for col in ("policy", "Σ TTA s", "makespan s", "succeeded", "max planned W"):
        table.add_column(col, justify="right")
    for name, res in result.policies.items():
        table.add_row(name, f"{res.sum_tta_s:,.0f}", f"{res.makespan_s:,.0f}",
                      f"{res.jobs_succeeded}/{result.jobs}", f"{res.max_planned_w:.2f}")
    stdout.print(table)


def _live(rounds: int, cap_w: float, hog_every: int, json_output: bool) -> None:
    from edgetrain.bench.budget_cluster import BenchSetupError, bench_budget_cluster

    try:
        result = bench_budget_cluster(rounds, cap_w, hog_every=hog_every,
                                      progress=lambda m: stderr.print(m, markup=False))
    except BenchSetupError as exc:
        stderr.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    if json_output:
        typer.echo(result.model_dump_json())
        return
    table = Table(title=f"{result.rounds} rounds, {result.jobs} jobs, cap {result.cap_w:g} W"
                  " (simulated)")
    for col in ("figure", "value"):
        table.add_column(col)
    for label, value in (
            ("jobs succeeded", f"{result.jobs_succeeded}/{result.jobs}"),
            ("max authorised W (pods)", f"{result.max_authorised_w:.3f}"),
            ("pod events over the cap", str(result.authorised_over_cap)),
            ("max measured W (agents)", f"{result.max_measured_w}"),
            ("s over cap + 1 W (2+ readings)", f"{result.seconds_over_cap_plus_1w}"),
            ("profiling pods under a ceiling", str(result.capped_sweeps)),
            ("wait before profiling, mean/max s",
             f"{result.wait_before_profile.mean_s}/{result.wait_before_profile.max_s}"),
            ("wait before training, mean/p95 s",
             f"{result.wait_before_training.mean_s}/{result.wait_before_training.p95_s}")):
        table.add_row(label, value)
    stdout.print(table)
    if result.failures:
        stderr.print("failures: " + "; ".join(result.failures), markup=False)
