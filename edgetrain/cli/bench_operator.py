"""`edgetrain bench operator`: the operator at fleet scale (kwok nodes, simulated pods)."""

from __future__ import annotations

import shlex
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from edgetrain.api.errors import BadInputError
from edgetrain.cli.bench import app as bench_app
from edgetrain.cli.common import exit_codes, stderr, stdout
from edgetrain.workloads.progress import Reporter

if TYPE_CHECKING:  # the bench imports the Kubernetes client: load it only when it runs
    from edgetrain.bench.operator import OperatorBenchResult


def _floats(text: str, option: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        raise BadInputError(f"{option}: expected comma-separated positive numbers, got {text!r}")
    return values


@bench_app.command("operator")
def bench_operator(
    jobs: Annotated[int, typer.Option(min=1, help="PowerAwareTrainingJobs created at once.")] = 100,
    nodes: Annotated[int, typer.Option(min=1, help="kwok Jetson nodes (plus the GPU servers).")
                     ] = 1000,
    servers: Annotated[int, typer.Option(min=1, help="kwok GPU servers the estimates' runs"
                                         " spread over.")] = 1,
    server_gpus: Annotated[
        int | None, typer.Option(min=1, help="nvidia.com/gpu of each server (default: room for"
                                 " every estimate at once).")
    ] = None,
    seeds: Annotated[int, typer.Option(min=1, help="Seeds per batch size of each job's"
                                       " estimate (its runs: 2 batch sizes × seeds).")] = 1,
    boards: Annotated[
        str | None, typer.Option(help="Comma-separated Jetson models the nodes are spread over"
                                 " (default: nano, orin-nano, xavier-nx, agx-orin).")
    ] = None,
    power_limits: Annotated[
        str, typer.Option(help="Power limits (W) the jobs cycle through; jobs of one limit"
                          " share profiles.")
    ] = "5,10,20",
    work: Annotated[
        float, typer.Option(min=0, help="Simulated seconds of every pod's work.")
    ] = 1.0,
    poll_interval: Annotated[
        float | None, typer.Option(help="The operator's --poll-interval (default: its own).")
    ] = None,
    deadline: Annotated[
        float, typer.Option(min=1, help="Give up on unfinished jobs after this many seconds.")
    ] = 1800.0,
    idle_window: Annotated[
        float, typer.Option(help="Seconds the idle fleet's control plane is sampled"
                            " before the first job: the baseline (0: none; default one Lease"
                            " renewal period, a quarter of --lease-duration, so that every"
                            " node's renewal is in it).")
    ] = -1.0,
    apiserver_profile: Annotated[
        float, typer.Option(min=0, help="Take the API server's CPU profile over this many"
                            " seconds from the first job, into kube-apiserver-cpu.pprof in"
                            " --run-dir (0: none).")
    ] = 0.0,
    lease_duration: Annotated[
        int, typer.Option(min=10, help="The kwok nodes' Lease duration in seconds (renewed"
                          " every quarter of it; the controller-manager's node grace matches"
                          " it).")
    ] = 200,
    lease_parallelism: Annotated[
        int, typer.Option(min=1, help="kwok's Lease renewals in flight.")
    ] = 64,
    operator_src: Annotated[
        Path | None, typer.Option(help="Run the operator from this source tree (as its"
                                  " PYTHONPATH), e.g. an older commit's checkout, to compare"
                                  " on the same bench.")
    ] = None,
    run_dir: Annotated[
        Path | None, typer.Option(help="Keep the cluster's files (logs, audit log) here;"
                                  " default: a temporary folder.")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Decision latency, API requests, memory and CPU of the real operator on a kwok fleet."""
    from edgetrain.bench.operator import DEFAULT_BOARDS, OperatorBenchConfig, run_bench

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # unwind: stop the operator and the cluster it started

    signal.signal(signal.SIGTERM, stop)

    with exit_codes():
        from edgetrain.cluster.boards import profile

        text = ",".join(DEFAULT_BOARDS) if boards is None else boards
        names = [b.strip() for b in text.split(",") if b.strip()]
        for name in names:
            try:
                kind = profile(name).kind
            except ValueError as exc:
                raise BadInputError(f"--boards: {exc}") from None
            if kind != "jetson":
                raise BadInputError(f"--boards: {name!r} is not a Jetson board")
        if not names:
            raise BadInputError("--boards: name at least one Jetson board, e.g. nano,orin")
        config = OperatorBenchConfig(
            jobs=jobs, nodes=nodes, boards=names, servers=servers, server_gpus=server_gpus,
            seeds=seeds,
            power_limits_w=_floats(power_limits, "--power-limits"), work_s=work,
            deadline_s=deadline, poll_interval_s=poll_interval,
            idle_window_s=lease_duration / 4 if idle_window < 0 else idle_window,
            apiserver_profile_s=apiserver_profile, lease_duration_s=lease_duration,
            lease_parallelism=lease_parallelism,
            operator_src=None if operator_src is None else str(operator_src.resolve()))
        if operator_src is not None and not (operator_src / "edgetrain").is_dir():
            raise BadInputError(f"--operator-src {operator_src}: no edgetrain package there;"
                                " give the root of a checkout")
        if apiserver_profile > 0 and run_dir is None:
            raise BadInputError("--apiserver-profile writes into the run folder: give --run-dir")
        command = shlex.join(["edgetrain", *sys.argv[1:]])
        with Reporter(stream=sys.stderr if json_output else None) as reporter:
            result = run_bench(config, reporter, command=command, run_dir=run_dir)
    if json_output:
        typer.echo(result.model_dump_json())
        return
    stdout.print(result_table(result))
    if result.bench_errors:
        stderr.print("bench errors: " + "; ".join(result.bench_errors), markup=False)


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def result_table(result: OperatorBenchResult) -> Table:
    """The run as a rich table."""
    cfg = result.config
    table = Table(title=f"operator: {cfg.jobs} jobs on {cfg.nodes} kwok nodes and"
                  f" {cfg.servers} GPU server{'s' if cfg.servers > 1 else ''}"
                  f" ({result.machine})",
                  caption=f"load average {result.load_average_before:.1f} before,"
                  f" {result.load_average_during:.1f} during; pods' work simulated"
                  f" ({cfg.work_s:g} s each)")
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [
        ("jobs succeeded / failed / unfinished",
         f"{result.jobs_succeeded} / {result.jobs_failed} / {result.jobs_unfinished}"),
        ("wall time", f"{result.wall_s:.1f} s"),
        ("decisions", str(result.decisions)),
        ("decision latency p50 / p95 / p99 / max",
         f"{_s(result.decision_p50_s)} / {_s(result.decision_p95_s)} /"
         f" {_s(result.decision_p99_s)} / {_s(result.decision_max_s)} s"),
    ]
    for name, stats in result.transitions.items():
        rows.append((f"  {name} (n={stats.count}, undecided {stats.undecided}) p50 / p95",
                     f"{_s(stats.p50_s)} / {_s(stats.p95_s)} s"))
    rows.append(("decision p95, clock from the input's write",
                 f"{_s(result.decision_p95_s_write_clock)} s"))
    figures = result.operator
    if figures is not None:
        rows += [
            ("operator's decisions (of its reconciles)",
             f"{figures.decisions} ({figures.reconciles})"),
            ("  event → decisive write p50 / p95",
             f"{_s(figures.decision_s.p50)} / {_s(figures.decision_s.p95)} s"),
            ("  of which queue wait p50 / p95",
             f"{_s(figures.queue_s.p50)} / {_s(figures.queue_s.p95)} s"),
            ("  requests in a row p50 / p95",
             f"{_s(figures.serial_requests.p50)} / {_s(figures.serial_requests.p95)}"),
            ("  CPU per decision (its thread) mean", f"{_s(figures.cpu_s.mean)} s"),
        ]
    rows += [
        ("API server round trip p50 / p95 (operator's requests)",
         f"{_s(result.apiserver_round_trip_p50_s)} / {_s(result.apiserver_round_trip_p95_s)} s"),
        ("lapsed leases / NodeNotReady / renewals",
         f"{result.lapsed_leases} / {result.node_not_ready} / {result.lease_renewals:,}"),
        ("idle fleet: requests/s", f"{result.idle_apiserver_requests_per_s:.1f}"),
    ]
    rows += [
        ("API requests (per job)",
         f"{result.api_requests:,} ({result.api_requests_per_job:.1f})"),
        ("API requests/s mean / peak 10 s",
         f"{result.api_requests_per_s_mean:.1f} / {result.api_requests_per_s_peak:.1f}"),
        ("operator peak RSS", f"{result.operator_rss_mb:.0f} MiB"),
        ("operator CPU", f"{result.operator_cpu_s:.1f} s ({result.operator_cpu_percent:.0f} %)"),
    ]
    for name, usage in result.control_plane.items():
        idle = result.control_plane_idle.get(name)
        before = "" if idle is None else f"; idle fleet {idle.cpu_percent:.0f} %"
        rows.append((f"{name} CPU, peak RSS", f"{usage.cpu_s:.1f} s ({usage.cpu_percent:.0f} %"
                     f"{before}), {usage.rss_mb:.0f} MiB"))
    if result.apiserver_requests:
        top = ", ".join(f"{k} {v:,}" for k, v in list(result.apiserver_requests_top.items())[:5])
        rows.append(("API requests of every client", f"{result.apiserver_requests:,} ({top})"))
    rows.append(("one node list", f"{result.node_list_mb:.1f} MiB"))
    est = result.estimate_phase
    if est is not None and est.count:
        rows.append((f"estimate phase (n={est.count}) p50 / max",
                     f"{_s(est.p50_s)} / {_s(est.max_s)} s"))
        rows.append(("estimate runs per server", ", ".join(
            f"{n} {c}" for n, c in result.estimate_pods_per_node.items())))
    for what, value in rows:
        table.add_row(what, value)
    return table
