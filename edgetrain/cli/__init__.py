"""The `edgetrain` command: one CLI, one subcommand per role."""

from __future__ import annotations

import typer

from edgetrain.cli import bench as _bench
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


def main() -> None:
    """Console-script entry point."""
    app()
