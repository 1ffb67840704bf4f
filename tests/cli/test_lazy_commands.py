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


# What a pod's start must not pay for: torch takes 6 s of CPU natively and 9-18 s under arm64
# emulation; numpy, the planner and the job's and efficiency's models most of a second emulated.
HEAVY = ("torch", "numpy", "matplotlib", "kubernetes", "edgetrain.planner", "edgetrain.api.job",
         "edgetrain.api.efficiency")
WORKLOAD_CLI = {"numpy", "edgetrain.planner", "edgetrain.api.job", "edgetrain.api.efficiency"}


def heavy_after(code: str) -> set[str]:
    """The HEAVY modules a fresh interpreter holds after running `code`."""
    check = (f"{code}\nimport json, sys\n"
             f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]), file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stderr.strip().splitlines()[-1]))


def cli(*argv: str) -> str:
    return (f"from edgetrain.cli import main\ntry:\n    main({list(argv)!r})\n"
            "except SystemExit:\n    pass")


@pytest.mark.parametrize(("code", "allowed"), [
    # The wrapper of every profile, train and estimate pod, and what its run imports.
    (cli("worker", "--help"), set()),
    ("import edgetrain.cli.operator, edgetrain.operator.worker", set()),
    # The node agent's DaemonSet pods and the chart's detect step.
    (cli("node-agent", "--help"), set()),
    ("import edgetrain.cli.node_agent, edgetrain.node_agent.agent, edgetrain.node_agent.detect",
     set()),
    # The workloads parse their options without torch (it comes with the workload itself).
    (cli("train", "--help"), WORKLOAD_CLI),
    (cli("profile", "--help"), WORKLOAD_CLI),
    (cli("estimate", "--help"), WORKLOAD_CLI),
    # One contract module does not load all the others (numpy with the efficiency vector).
    ("import edgetrain.api.keys, edgetrain.api.errors", set()),
], ids=["worker", "worker-run", "node-agent", "node-agent-run", "train", "profile", "estimate",
        "api-keys"])
def test_a_pod_start_imports_nothing_heavy_it_does_not_use(code: str, allowed: set[str]) -> None:
    assert heavy_after(code) <= allowed


def test_the_api_package_still_exports_every_contract() -> None:
    """Its names are loaded on first use now, from the modules that define them."""
    import edgetrain.api as api
    from edgetrain.api import efficiency, errors, plan, profile

    for name in api.__all__:
        module = {efficiency, errors, plan, profile}
        assert any(getattr(m, name, None) is getattr(api, name) for m in module), name
    assert set(api.__all__) == set(api._MODULE_OF) and set(api.__all__) <= set(dir(api))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        api.nothing  # noqa: B018
