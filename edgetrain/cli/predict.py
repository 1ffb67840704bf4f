"""`edgetrain train-reference` and `edgetrain bench predictor`: the PowerTrain-style predictor.

PyTorch is imported inside the commands (through the predictor's training functions).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from edgetrain.cli.bench import app as bench_app
from edgetrain.cli.common import exit_codes, stderr, stdout
from edgetrain.cli.workloads import JsonProgressOpt, parse_int_list
from edgetrain.planner import PlanInputError
from edgetrain.workloads.progress import Reporter

if TYPE_CHECKING:
    from edgetrain.bench.predictor import CaseResult

BoardsOpt = Annotated[str, typer.Option(help="Comma-separated simulated boards, or 'all'.")]


def _boards(text: str) -> list[str]:
    from edgetrain.predictor.twin_data import simulated_boards

    known = simulated_boards()
    if text.strip() == "all":
        return known
    boards = [b.strip() for b in text.split(",") if b.strip()]
    unknown = [b for b in boards if b not in known]
    if unknown or not boards:
        raise PlanInputError(f"unknown board(s) {unknown or text!r}; simulated: {', '.join(known)}")
    return boards


def train_reference_command(
    board: BoardsOpt = "all",
    model: Annotated[str, typer.Option(help="Reference workload (the paper uses ResNet).")] = (
        "resnet18"
    ),
    points: Annotated[int, typer.Option(min=100, help="(batch size, mode) points sampled.")] = (
        6000
    ),
    epochs: Annotated[int, typer.Option(min=1)] = 100,
    seed: int = 0,
    noise: Annotated[float, typer.Option(min=0.0, help="Relative σ of measurement noise.")] = 0.01,
    output_dir: Annotated[
        Path | None,
        typer.Option(help="Where to write <board>.npz (default: the package's references)."),
    ] = None,
    json_progress: JsonProgressOpt = None,
) -> None:
    """Train the reference time/power MLPs per board on its simulated full-mode profile.

    Measurements are the twin's ground truth plus seeded Gaussian noise (simulated); the file is
    stamped with the twin's fingerprint so a later twin change marks it stale.
    """
    from edgetrain.predictor.reference import (
        REFERENCE_CONFIG,
        package_dir,
        save_reference,
        train_reference,
        write_reference_card,
    )
    from edgetrain.workloads.profile_predicted import reference_workload_cost

    with exit_codes():
        boards = _boards(board)
        directory = output_dir or package_dir()
        config = REFERENCE_CONFIG.model_copy(update={"epochs": epochs})
        with Reporter(json_lines=json_progress) as reporter:
            reporter.start("train references (simulated)", 3 * len(boards), simulated=True)
            done = 0
            for name in boards:
                started = time.monotonic()

                def tick(target: object, holdout: float, name: str = name) -> None:
                    nonlocal done
                    done += 1
                    reporter.advance(done, f"{name} {target}: holdout MAPE {holdout:.2f} %")

                ref = train_reference(
                    name,
                    reference_workload_cost(model),
                    points=points,
                    config=config,
                    noise_rel=noise,
                    seed=seed,
                    on_target=tick,
                )
                path = directory / f"{name}.npz"
                save_reference(ref, path)
                write_reference_card(ref, path.with_suffix(".json"))
                reporter.event(
                    "result",
                    board=name,
                    path=str(path),
                    bytes=path.stat().st_size,
                    seconds=round(time.monotonic() - started, 1),
                    **ref.meta.model_dump(include={"twin_fingerprint", "holdout_mape_pct"}),
                )
                if not reporter.json_lines:
                    stderr.print(
                        f"{name}: {path} ({path.stat().st_size // 1024} KB), holdout MAPE "
                        + ", ".join(f"{k} {v:.2f} %" for k, v in ref.meta.holdout_mape_pct.items())
                        + " (simulated)"
                    )


@bench_app.command("predictor")
def bench_predictor(
    boards: BoardsOpt = "all",
    workloads: Annotated[str, typer.Option(help="Target workloads (comma-separated).")] = (
        "mobilenetv2,resnet8,charformer-small"
    ),
    cross_device: Annotated[
        str,
        typer.Option(help="REF:TARGET board pairs (MAPE loss), comma-separated; '' for none."),
    ] = "jetson-agx-orin:jetson-orin-nano,jetson-agx-orin:jetson-agx-xavier",
    cross_workloads: Annotated[str, typer.Option(help="Workloads for cross-device cases.")] = (
        "resnet18,mobilenetv2"
    ),
    batch_sizes: Annotated[str, typer.Option(help="Target batch sizes.")] = "8,16,32,64,128",
    k: Annotated[int, typer.Option(min=2, help="Profiled points per transfer.")] = 50,
    repeats: Annotated[int, typer.Option(min=1, help="Seeds per case.")] = 3,
    limits: Annotated[int, typer.Option(min=2, help="Power limits in the sweep.")] = 34,
    epochs: Annotated[int, typer.Option(min=1, help="Transfer/scratch epochs.")] = 100,
    margin_quantile: Annotated[float, typer.Option(min=0.01, max=1.0)] = 0.9,
    references: Annotated[
        Path | None, typer.Option(help="Folder of reference .npz (default: the package's).")
    ] = None,
    markdown: Annotated[Path | None, typer.Option(help="Also write the tables here.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="One JSON line per case.")] = False,
) -> None:
    """Predicted profiles vs the paper's baselines on the board twins (all figures simulated)."""
    from edgetrain.api.io import write_text_atomic
    from edgetrain.bench.predictor import BenchConfig, markdown_tables, run_case
    from edgetrain.predictor.mlp import Loss, TrainConfig
    from edgetrain.predictor.reference import load_reference
    from edgetrain.workloads import workload_cost
    from edgetrain.workloads.profile_predicted import reference_workload_cost

    with exit_codes():
        config = BenchConfig(
            batch_sizes=tuple(parse_int_list(batch_sizes, "--batch-sizes")),
            k=k,
            repeats=repeats,
            limits=limits,
            margin_quantile=margin_quantile,
            train=TrainConfig(epochs=epochs),
        )
        cases: list[tuple[str, str, str, Loss]] = []
        for board in _boards(boards):
            for wl in (w.strip() for w in workloads.split(",") if w.strip()):
                cases.append((board, board, wl, Loss.mse))
        for pair in (p.strip() for p in cross_device.split(",") if p.strip()):
            ref_board, _, target = pair.partition(":")
            _boards(f"{ref_board},{target}")
            for wl in (w.strip() for w in cross_workloads.split(",") if w.strip()):
                cases.append((ref_board, target, wl, Loss.mape))
        results: list[CaseResult] = []
        with Reporter(json_lines=json_output) as reporter:
            reporter.start("bench predictor (simulated)", len(cases), simulated=True)
            for i, (ref_board, board, wl, loss) in enumerate(cases):
                reference = load_reference(ref_board, references, cost_of=workload_cost)
                result = run_case(
                    board,
                    reference_workload_cost(wl),
                    reference,
                    config,
                    loss=loss,
                    on_step=functools.partial(reporter.advance, i),
                )
                results.append(result)
                reporter.advance(i + 1, f"{board} {wl} done")
                if json_output:
                    typer.echo(json.dumps(result.model_dump(mode="json")))
    if markdown is not None:
        write_text_atomic(markdown, markdown_tables(results))
    if json_output:
        return
    _print_tables(results)


def _print_tables(rows: Sequence[CaseResult]) -> None:
    table = Table(title="prediction MAPE % over every (batch size, mode) — simulated (twin)")
    for col in ("board", "workload", "ref", "PT time", "PT power", "NN time", "NN power", "margin"):
        table.add_column(col, justify="right")
    for c in rows:
        pt, nn = c.mape_pct["PT"], c.mape_pct["NN scratch"]
        table.add_row(
            c.board,
            c.workload,
            c.reference.split("@")[0],
            f"{pt['time_per_sample_s']:.1f}",
            f"{pt['peak_power_w']:.1f}",
            f"{nn['time_per_sample_s']:.1f}",
            f"{nn['peak_power_w']:.1f}",
            f"{100 * c.power_margin['PT']:.1f} %",
        )
    stdout.print(table)
    opt = Table(title="selection under a power-limit sweep — simulated (twin)")
    for col in ("board", "workload", "strategy", "penalty med %", ">L %", ">L+1W %", "area W", "h"):
        opt.add_column(col, justify="right")
    for c in rows:
        for s in c.strategies:
            opt.add_row(
                c.board,
                c.workload,
                s.strategy,
                "—" if s.penalty_median_pct is None else f"{s.penalty_median_pct:.1f}",
                f"{s.over_limit_pct:.0f}",
                f"{s.over_limit_1w_pct:.0f}",
                f"{s.excess_area_w:.2f}",
                f"{s.profiling_h:.2f}",
            )
    stdout.print(opt)
