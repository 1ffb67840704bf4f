"""One subcommand imports only its own module: most processes the operator starts are one short
`worker`, `profile` or `node-agent`, and importing every role cost each 0.9 s (5 s emulated)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from edgetrain.cli import GROUPS, build_app, subcommand_of

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


@pytest.mark.parametrize("group", list(GROUPS))
def test_a_group_built_alone_has_every_subcommand_of_the_whole_cli(group: str) -> None:
    """In a fresh interpreter (here every role is imported already): nothing is registered
    on a group only as a side effect of another role's import."""
    import typer.main

    code = ("import json, typer.main\nfrom edgetrain.cli import build_app\n"
            f"group = typer.main.get_command(build_app({group!r})).commands[{group!r}]\n"
            "print(json.dumps(sorted(group.commands)))\n")
    alone = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120)
    assert alone.returncode == 0, alone.stderr
    whole = typer.main.get_command(build_app()).commands[group]  # type: ignore[attr-defined]
    assert json.loads(alone.stdout) == sorted(whole.commands)
