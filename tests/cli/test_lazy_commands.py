"""One subcommand imports only its own module: most processes the operator starts are one short
`worker`, `profile` or `node-agent`, and importing every role cost each 0.9 s (5 s emulated)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from edgetrain.cli import COMMANDS, GROUPS, build_app, subcommand_of

ROLES = ("edgetrain.cli.bench", "edgetrain.cli.cluster", "edgetrain.cli.workloads",
         "edgetrain.cli.operator", "edgetrain.cli.run", "edgetrain.bench.planner",
         "edgetrain.cluster")


def modules_after(argv: list[str]) -> set[str]:
    """The roles a fresh interpreter has imported after `edgetrain ARGV` (ARGV asks for help)."""
    code = ("import sys\nfrom edgetrain.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "import json\n"
            f"print(json.dumps([m for m in {ROLES!r} if m in sys.modules]), file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         timeout=120)
    return set(json.loads(out.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize(("argv", "imported"), [
    (["worker", "--help"], {"edgetrain.cli.operator"}),
    (["--debug", "profile", "--help"], {"edgetrain.cli.workloads"}),
    (["cluster", "status", "--help"], {"edgetrain.cli.cluster", "edgetrain.cluster"}),
])
def test_a_subcommand_imports_only_its_role(argv: list[str], imported: set[str]) -> None:
    assert modules_after(argv) == imported


def test_help_and_unknown_names_build_the_whole_cli() -> None:
    assert modules_after(["--help"]) >= {"edgetrain.cli.bench", "edgetrain.cli.cluster",
                                         "edgetrain.cli.workloads", "edgetrain.cli.operator"}
    assert subcommand_of(["--debug"]) is None
    assert subcommand_of(["trian", "--batch-size", "8"]) is None  # click then suggests `train`
    assert subcommand_of(["--debug", "bench", "paper"]) == "bench"


@pytest.mark.parametrize("name", [*COMMANDS, *GROUPS])
def test_each_subcommand_alone_is_the_one_the_whole_cli_has(name: str) -> None:
    """Built alone, a subcommand has the same parameters as in the whole CLI (its help, its
    options): nothing is registered only as a side effect of another role's import."""
    import typer.main

    def params(app: typer.Typer) -> list[str]:
        group = typer.main.get_command(app)
        command = group.commands[name]  # type: ignore[attr-defined]
        sub = getattr(command, "commands", {})
        return sorted(json.dumps([p.name for p in c.params]) for c in [command, *sub.values()])

    whole = build_app()
    assert params(build_app(name)) == params(whole)
