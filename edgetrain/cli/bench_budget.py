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
) -> None:
    """The allocator, an equal split and FCFS at each job's own limit, same jobs, one run
    (every figure simulated on device twins)."""
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
