"""Progress for long work: rich bars in a terminal, JSON lines (one event per line) otherwise."""

from __future__ import annotations

import json
import sys
import time
from types import TracebackType
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class Reporter:
    """Emits `event(kind, **fields)`; tracks one task bar at a time in a terminal."""

    def __init__(self, *, json_lines: bool | None = None, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stdout
        self.json_lines = (not sys.stderr.isatty()) if json_lines is None else json_lines
        self._progress: Progress | None = None
        self._task: Any = None
        if not self.json_lines:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )

    def __enter__(self) -> Reporter:
        if self._progress:
            self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress:
            self._progress.stop()

    def start(self, description: str, total: float, **fields: Any) -> None:
        """Begin a unit of work with a known total."""
        if self._progress:
            if self._task is not None:
                self._progress.update(self._task, visible=True)
            self._task = self._progress.add_task(description, total=total, status="")
        self.event("start", what=description, total=total, **fields)

    def advance(self, completed: float, status: str = "", **fields: Any) -> None:
        """Report the work done so far (absolute)."""
        if self._progress and self._task is not None:
            self._progress.update(self._task, completed=completed, status=status)
        self.event("progress", completed=completed, status=status, **fields)

    def event(self, kind: str, **fields: Any) -> None:
        """One JSON line (only when not drawing bars)."""
        if self.json_lines:
            record = {"event": kind, "time": round(time.time(), 3), **fields}
            self._stream.write(json.dumps(record, default=str) + "\n")
            self._stream.flush()
