"""Shared CLI plumbing: consoles and turning known errors into exit codes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console

from edgetrain.api.errors import BadInputError
from edgetrain.planner import InfeasibleError

EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3

stdout = Console()
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


@contextmanager
def exit_codes() -> Iterator[None]:
    """Bad input exits 2 with the message; an infeasible plan exits 3 with one line."""
    try:
        yield
    except BadInputError as exc:
        stderr.print(f"error: {exc}", markup=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except InfeasibleError as exc:
        stderr.print(f"infeasible: {exc}", markup=False)
        raise typer.Exit(EXIT_INFEASIBLE) from None
