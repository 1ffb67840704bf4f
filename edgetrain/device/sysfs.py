"""Sysfs root resolution and the single read/write path every device file goes through.

On a Jetson the root is `/`. Tests and the twin point `EDGETRAIN_SYSFS_ROOT` (or an explicit
root) at a directory with the same layout. Writes go through `write_value`, which is a plain
`open().write()` unless an in-process twin registered a hook for that root: the hook raises
`OSError(EINVAL)` exactly where a 4.9 kernel would, so the calling code is the Jetson code.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

ENV_SYSFS_ROOT = "EDGETRAIN_SYSFS_ROOT"

WriteHook = Callable[[Path, str], None]
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

_hooks: dict[Path, WriteHook] = {}
_hooks_lock = threading.Lock()


def resolve_root(root: str | os.PathLike[str] | None = None) -> Path:
    """Explicit root, else `$EDGETRAIN_SYSFS_ROOT`, else `/`."""
    if root is None or str(root) == "":
        root = os.environ.get(ENV_SYSFS_ROOT) or "/"
    return Path(root)


def read_text(path: Path) -> str:
    """File contents with trailing whitespace and devicetree NUL terminators removed."""
    return path.read_bytes().decode("utf-8", errors="replace").rstrip("\x00\n\r\t ")


def read_int(path: Path, retries: int = 5) -> int:
    """An integer sysfs attribute.

    A kernel attribute is never empty; a twin's plain file is only while it is being created
    (`write_value` never truncates before it writes), so retry briefly rather than fail.
    """
    text = read_text(path)
    for _ in range(retries):
        if text:
            break
        time.sleep(0.002)
        text = read_text(path)
    return int(text.split()[0])


def register_write_hook(root: Path, hook: WriteHook) -> None:
    """Route writes under `root` through `hook` (used by the in-process twin only)."""
    with _hooks_lock:
        _hooks[Path(os.path.realpath(root))] = hook


def unregister_write_hook(root: Path) -> None:
    """Remove a hook registered for `root`."""
    with _hooks_lock:
        _hooks.pop(Path(os.path.realpath(root)), None)


def _hook_for(path: Path) -> WriteHook | None:
    if not _hooks:
        return None
    real = Path(os.path.realpath(path))
    with _hooks_lock:
        for root, hook in _hooks.items():
            if real == root or root in real.parents:
                return hook
    return None


def write_value(path: Path, value: str) -> None:
    """Write one sysfs attribute; raises OSError as the kernel reports it (EINVAL, EACCES...)."""
    hook = _hook_for(path)
    if hook is not None:
        hook(path, value)
        return
    # Newline-terminated as `echo` stores it (every sysfs store accepts that), and without
    # O_TRUNC: a twin's plain file is then never empty, even while the writer is descheduled
    # mid-store, and a shorter value only leaves the old tail after its newline until the
    # truncate (readers take the first word). Sysfs ignores the truncate.
    with _stop_signals_deferred():
        store_in_place(path, as_stored(value))


def as_stored(value: str) -> bytes:
    """A value as `echo` stores it: newline-terminated (every sysfs store accepts that)."""
    return (value if value.endswith("\n") else value + "\n").encode()


def store_in_place(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` over the file's start, then cut the file to its length: never empty, one
    inode (the twin stores its live values this way too; far cheaper than a rename)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        if os.fstat(fd).st_size > len(data):
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


@contextmanager
def _stop_signals_deferred() -> Iterator[None]:
    """Run SIGINT/SIGTERM handlers only after the block, so a store is never cut in half.

    Our CLIs turn SIGTERM into KeyboardInterrupt to restore the GPU range. Raised between the
    truncate and the write, it left a twin's plain file empty: the restore then read nothing
    and the range stayed pinned. Handlers run in the main thread only, so other threads pass.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous: dict[signal.Signals, _Handler] = {}
    try:
        for stop in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(stop) is not None:  # None: set outside Python; left alone
                previous[stop] = signal.signal(stop, lambda n, _f: caught.append(n))
        yield
    finally:
        for stop, handler in previous.items():
            signal.signal(stop, handler)
        for signum in caught:
            handler = previous[signal.Signals(signum)]
            if callable(handler):
                handler(signum, None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)
