"""`edgetrain device …`: inspect a Jetson (or a twin tree) and run a simulated Jetson."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from edgetrain.api.errors import InputError
from edgetrain.cli.common import exit_codes
from edgetrain.device.board import DeviceInfo, read_device_info
from edgetrain.device.sysfs import ENV_SYSFS_ROOT
from edgetrain.workloads.catalog import MODELS

app = typer.Typer(help="GPU frequency, power rails and the Jetson digital twin.")

_out = Console()
_err = Console(stderr=True, highlight=False, soft_wrap=True)


def _render(info: DeviceInfo) -> None:
    tag = " (simulated)" if info.simulated else ""
    b = info.board
    _out.print(f"[bold]{b.model or 'unknown board'}[/bold]{tag}")
    _out.print(f"board id: {b.board_id or '?'}   SoC: {b.soc or '?'}   L4T: {b.l4t or '?'}")
    _out.print(f"sysfs root: {info.sysfs_root}")
    if info.gpu is not None:
        g = info.gpu
        table = ", ".join(f"{f / 1e6:g}" for f in g.available_frequencies_hz)
        _out.print(
            f"GPU{tag}: cur {g.cur_freq_hz / 1e6:g} MHz, min {g.min_freq_hz / 1e6:g} MHz, "
            f"max {g.max_freq_hz / 1e6:g} MHz, governor {g.governor or '?'}, "
            f"load {g.load_permille if g.load_permille is not None else '?'}‰"
        )
        _out.print(f"GPU frequencies (MHz): {table}")
    if info.power is not None:
        t = Table(title=f"Power rails{tag} ({info.power.backend})")
        t.add_column("rail")
        t.add_column("power (mW)", justify="right")
        t.add_column("voltage (mV)", justify="right")
        t.add_column("current (mA)", justify="right")
        for r in info.power.rails:
            t.add_row(
                r.name,
                f"{r.power_mw:.0f}",
                "" if r.voltage_mv is None else f"{r.voltage_mv:.0f}",
                "" if r.current_ma is None else f"{r.current_ma:.0f}",
            )
        _out.print(t)
        _out.print(f"total{tag}: {info.power.total_power_w:.3f} W ({info.power.total_rule})")
    if info.thermal:
        temps = ", ".join(
            f"{z.name} {z.temp_c:.1f} °C" if z.temp_c is not None else f"{z.name} ?"
            for z in info.thermal
        )
        _out.print(f"thermal{tag}: {temps}")
    for e in info.errors:
        _err.print(f"warning: {e}", markup=False)


@app.command("info")
def info(
    sysfs_root: Annotated[
        Path | None,
        typer.Option(help=f"Sysfs root (default ${ENV_SYSFS_ROOT} or /).", show_default=False),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Board, GPU frequencies, power rails and total, temperatures.

    Exit codes: 0 read, 1 no GPU and no power sensor under the root, 2 the root is not a folder.
    """
    with exit_codes():
        if sysfs_root is not None and not sysfs_root.is_dir():
            raise InputError("--sysfs-root", f"{sysfs_root} is not a folder",
                             hint="a sysfs root: / on a Jetson, or a twin's tree")
    report = read_device_info(sysfs_root)
    if as_json:
        typer.echo(json.dumps(report.model_dump(mode="json")))
    else:
        _render(report)
    if report.gpu is None and report.power is None:
        raise typer.Exit(1)


def _parse_shape(text: str) -> tuple[int, int, int]:
    try:
        parts = [int(p) for p in text.replace("x", ",").split(",") if p.strip()]
    except ValueError:
        parts = []
    if len(parts) != 3 or min(parts) < 1:
        raise InputError("--input-shape", f"must be C,H,W (e.g. 3,32,32), got {text!r}")
    return parts[0], parts[1], parts[2]


@app.command("sim")
def sim(
    model: Annotated[str, typer.Option("--model", help="Board to simulate.")] = "jetson-nano",
    root: Annotated[Path, typer.Option(help="Directory for the live sysfs tree.")] = Path(
        "/tmp/edgetrain-twin"
    ),
    workload: Annotated[
        str | None, typer.Option(help="Start training this model (e.g. resnet18); else idle.")
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1)] = 64,
    input_shape: Annotated[str, typer.Option(help="C,H,W")] = "3,32,32",
    num_classes: Annotated[int, typer.Option(min=1)] = 10,
    gpu_freq_mhz: Annotated[
        float | None, typer.Option(help="Pin this GPU frequency at start (MHz).")
    ] = None,
    seed: Annotated[int, typer.Option()] = 0,
    noise: Annotated[float, typer.Option(help="Relative sensor noise (sigma).")] = 0.01,
    tick_s: Annotated[float, typer.Option(help="Update interval of the live files.")] = 0.02,
    thermal_throttle: Annotated[bool, typer.Option(help="Simulate thermal throttling.")] = False,
    duration_s: Annotated[
        float, typer.Option(help="Stop after this many seconds (0: until Ctrl-C).")
    ] = 0.0,
) -> None:
    """Create a live twin tree and keep it updating until interrupted."""
    from edgetrain.device.devfreq import GpuDevfreq
    from edgetrain.device.errors import DeviceError
    from edgetrain.device.sim import BOARDS, DeviceTwin
    from edgetrain.workloads import workload_cost

    if model not in BOARDS:
        _err.print(f"error: unknown board {model!r}; choose one of: {', '.join(BOARDS)}")
        raise typer.Exit(2)
    with exit_codes():  # every option is checked before the twin starts
        shape = _parse_shape(input_shape)
        if workload is not None and workload not in MODELS:
            raise InputError("--workload", f"unknown model {workload!r}; known: "
                             + ", ".join(sorted(MODELS)))
        if root.exists() and not root.is_dir():
            raise InputError("--root", f"{root} exists and is not a folder")
    twin = DeviceTwin(
        model,
        root,
        tick_s=tick_s,
        seed=seed,
        noise_rel=noise,
        thermal_throttle=thermal_throttle,
        cost_of=workload_cost,
    )
    with twin:
        if gpu_freq_mhz is not None:
            try:
                GpuDevfreq.discover(root).pin(round(gpu_freq_mhz * 1e6))
            except DeviceError as exc:
                _err.print(f"error: {exc}", markup=False)
                raise typer.Exit(2) from None
        if workload is not None:
            twin.set_workload(
                workload, batch_size, input_shape=shape, num_classes=num_classes
            )
        typer.echo(f"simulated {model} (all figures simulated) running at {root.resolve()}")
        typer.echo(f"  export {ENV_SYSFS_ROOT}={root.resolve()}")
        typer.echo("  then: edgetrain device info   (Ctrl-C stops the twin)")
        typer.echo(
            f"  drive it: write {root.resolve()}/run/edgetrain-twin/workload.json "
            '({"model": "resnet18", "batch_size": 64, "busy": true})'
        )
        deadline = time.monotonic() + duration_s if duration_s > 0 else None
        try:
            while deadline is None or time.monotonic() < deadline:
                time.sleep(0.2)
        except KeyboardInterrupt:
            _out.print("stopping the twin (the tree stays on disk)")
