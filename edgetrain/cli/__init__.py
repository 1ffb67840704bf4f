"""The `edgetrain` command: one CLI, one subcommand per role."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Annotated

import typer

from edgetrain.cli import bench as _bench
from edgetrain.cli import bench_budget as _bench_budget  # noqa: F401  (`bench budget`)
from edgetrain.cli import bench_operator as _bench_operator  # noqa: F401  (`bench operator`)
from edgetrain.cli import bench_paper as _bench_paper  # noqa: F401  (registers `bench paper`)
from edgetrain.cli import cluster as _cluster
from edgetrain.cli import device as _device
from edgetrain.cli import node_agent as _node_agent
from edgetrain.cli import operator as _operator
from edgetrain.cli import plan as _plan
from edgetrain.cli import predict as _predict
from edgetrain.cli import run as _run
from edgetrain.cli import workloads as _workloads

app = typer.Typer(
    name="edgetrain",
    help="Power-aware fine-tuning on NVIDIA Jetson fleets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _options(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help="Show tracebacks of input errors too (or EDGETRAIN_DEBUG=1)."
        ),
    ] = False,
) -> None:
    """Power-aware fine-tuning on NVIDIA Jetson fleets."""
    if debug:
        os.environ["EDGETRAIN_DEBUG"] = "1"  # also reaches the commands' subprocesses


app.command("plan")(_plan.plan)
app.command("pretrain")(_workloads.pretrain_command)
app.command("estimate")(_workloads.estimate_command)
app.command("train")(_workloads.train_command)
app.command("profile")(_workloads.profile_command)
app.command("train-reference")(_predict.train_reference_command)
app.command("run")(_run.run_command)
app.add_typer(_bench.app, name="bench")
app.add_typer(_cluster.app, name="cluster")
app.command("vnodes")(_cluster.vnodes)
app.add_typer(_device.app, name="device")
app.command("operator")(_operator.operator_command)
app.command("crds")(_operator.crds_command)
app.command("worker", context_settings={"allow_interspersed_args": False})(
    _operator.worker_command
)
app.command("node-agent")(_node_agent.node_agent_command)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: a usage error is one line on stderr and exit code 2."""
    from edgetrain.cli.common import EXIT_BAD_INPUT, debug_enabled, one_line

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = app(args=args, prog_name="edgetrain", standalone_mode=False)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        code = 130
    except Exception as exc:
        # click's usage errors (typer may vendor click, so matched by shape, not by class).
        format_message = getattr(exc, "format_message", None)
        if format_message is None or debug_enabled() or "--debug" in args:
            raise
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help(), file=sys.stderr)
            code = EXIT_BAD_INPUT
        else:
            where = ctx.command_path if ctx is not None else "edgetrain"
            print(
                f"error: {where}: {one_line(format_message())} (see {where} --help)",
                file=sys.stderr,
            )
            code = int(getattr(exc, "exit_code", EXIT_BAD_INPUT))
    sys.exit(code if isinstance(code, int) else 0)
