"""Errors the CLI maps to exit codes: bad input (what, where, how to fix it) and infeasible."""

from __future__ import annotations

from pathlib import Path


class BadInputError(ValueError):
    """Any error caused by what the user passed in; the CLI exits 2 with its message."""


class InfeasibleError(Exception):
    """No profiled point is within the power limit (the CLI exits 3); here, not in the planner,
    so the CLI maps it to its exit code without importing the planner and numpy."""


class InputError(BadInputError):
    """Bad input: names the file, the row (or JSON location), the field and the problem."""

    def __init__(
        self,
        source: str | Path,
        message: str,
        *,
        row: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.source = str(source)
        self.row = row
        self.field = field
        self.message = message
        self.hint = hint
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.source
        if self.row is not None:
            where += f", row {self.row}"
        if self.field is not None:
            where += f", field '{self.field}'"
        text = f"{where}: {self.message}"
        if self.hint:
            text += f" ({self.hint})"
        return text


def read_input_text(path: str | Path, hint: str | None = None) -> str:
    """A user's input file as text; every way it cannot be read is an InputError."""
    file = Path(path)
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(file, "no such file", hint=hint) from None
    except IsADirectoryError:
        raise InputError(file, "is a folder, not a file", hint=hint) from None
    except PermissionError:
        raise InputError(file, "not readable (check its permissions)") from None
    except UnicodeDecodeError:
        raise InputError(file, "not a UTF-8 text file") from None
    except OSError as exc:
        raise InputError(file, f"cannot be read: {exc.strerror or exc}") from None
