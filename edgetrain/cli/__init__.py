"""The `edgetrain` command: one CLI, one subcommand per role."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer

# Each subcommand's module is imported only when that subcommand runs: importing every role
# (the cluster, the benchmarks, numpy) cost each process 0.9 s here and 5 s on an emulated
# arm64 pod, and most processes are one short `worker`, `profile` or `node-agent`.
# name -> (module, attribute, typer settings); order is the order `--help` lists them.
COMMANDS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "plan": ("edgetrain.cli.plan", "plan", {}),
    "pretrain": ("edgetrain.cli.workloads", "pretrain_command", {}),
    "estimate": ("edgetrain.cli.workloads", "estimate_command", {}),
    "train": ("edgetrain.cli.workloads", "train_command", {}),
    "profile": ("edgetrain.cli.workloads", "profile_command", {}),
    "train-reference": ("edgetrain.cli.predict", "train_reference_command", {}),
    "run": ("edgetrain.cli.run", "run_command", {}),
    "operator": ("edgetrain.cli.operator", "operator_command", {}),
    "crds": ("edgetrain.cli.operator", "crds_command", {}),
    "worker": ("edgetrain.cli.operator", "worker_command",
               {"context_settings": {"allow_interspersed_args": False}}),
    "node-agent": ("edgetrain.cli.node_agent", "node_agent_command", {}),
    "doctor": ("edgetrain.cli.doctor", "doctor_command", {}),
}
# name -> (module whose `app` is the group, modules that add commands to it)
GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "bench": ("edgetrain.cli.bench", ("edgetrain.cli.bench_budget",
                                      "edgetrain.cli.bench_operator",
                                      "edgetrain.cli.bench_paper",
                                      "edgetrain.cli.predict")),
    "cluster": ("edgetrain.cli.cluster", ()),
    "device": ("edgetrain.cli.device", ()),
}


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


def build_app(only: str | None = None) -> typer.Typer:
    """The CLI with every subcommand, or with `only` that one (the rest never imported)."""
    cli = typer.Typer(
        name="edgetrain",
        help="Power-aware fine-tuning on NVIDIA Jetson fleets.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    cli.callback()(_options)
    for name, (module, attribute, settings) in COMMANDS.items():
        if only in (None, name):
            cli.command(name, **settings)(getattr(importlib.import_module(module), attribute))
    for name, (module, extensions) in GROUPS.items():
        if only in (None, name):
            group = importlib.import_module(module).app
            for extension in extensions:
                importlib.import_module(extension)
            cli.add_typer(group, name=name)
    return cli


def subcommand_of(args: Sequence[str]) -> str | None:
    """The subcommand `args` name, if it is one of ours (else None: build the whole CLI, so
    help lists everything and an unknown name gets click's own message)."""
    words = [a for a in args if not a.startswith("-")]
    if not words or words[0] not in COMMANDS.keys() | GROUPS.keys():
        return None
    return words[0]


_full_app: typer.Typer | None = None


def __getattr__(name: str) -> typer.Typer:
    """`edgetrain.cli.app`: the whole CLI, built on first use (tests drive it in-process)."""
    global _full_app
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _full_app is None:
        _full_app = build_app()
    return _full_app


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: a usage error is one line on stderr and exit code 2."""
    from edgetrain.cli.common import EXIT_BAD_INPUT, debug_enabled, one_line

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        cli = build_app(subcommand_of(args))
        code = cli(args=args, prog_name="edgetrain", standalone_mode=False)
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
