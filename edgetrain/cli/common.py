"""Shared CLI plumbing: consoles and turning known errors into exit codes."""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

import typer
from pydantic import ValidationError
from rich.console import Console

from edgetrain.api.errors import BadInputError, InfeasibleError

EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3

stdout = Console()
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def debug_enabled() -> bool:
    """`edgetrain --debug …` or EDGETRAIN_DEBUG=1: show tracebacks of user errors too."""
    return os.environ.get("EDGETRAIN_DEBUG", "").lower() not in ("", "0", "false", "no")


def one_line(text: str) -> str:
    """A message folded onto one line (a termination message or terminal keeps it whole)."""
    return " ".join(text.split())


def validation_message(exc: ValidationError) -> str:
    """The first error of a pydantic ValidationError as 'field: problem'."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    message = err["msg"].removeprefix("Value error, ")
    got = f" (got {err['input']!r})" if err["type"] != "value_error" and "input" in err else ""
    return f"{where}: {message}{got}" if where else f"{message}{got}"


def _debug_traceback() -> None:
    if debug_enabled():
        stderr.print(traceback.format_exc(), markup=False)


@contextmanager
def exit_codes() -> Iterator[None]:
    """Bad input exits 2 with one line; an infeasible plan exits 3 with one line."""
    try:
        yield
    except BadInputError as exc:
        _debug_traceback()
        stderr.print(f"error: {one_line(str(exc))}", markup=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except ValidationError as exc:
        # Raised while building a spec from command-line options: the user's to fix.
        _debug_traceback()
        stderr.print(f"error: {one_line(validation_message(exc))}", markup=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except InfeasibleError as exc:
        _debug_traceback()
        stderr.print(f"infeasible: {one_line(str(exc))}", markup=False)
        raise typer.Exit(EXIT_INFEASIBLE) from None
