"""Sysfs root resolution and the single read/write path every device file goes through.

On a Jetson the root is `/`. Tests and the twin point `EDGETRAIN_SYSFS_ROOT` (or an explicit
root) at a directory with the same layout. Writes go through `write_value`, which is a plain
`open().write()` unless an in-process twin registered a hook for that root: the hook raises
`OSError(EINVAL)` exactly where a 4.9 kernel would, so the calling code is the Jetson code.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

ENV_SYSFS_ROOT = "EDGETRAIN_SYSFS_ROOT"

WriteHook = Callable[[Path, str], None]

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

    A kernel attribute is never empty, but a twin's plain file is for the instant between
    another process's truncate and write; retry briefly rather than fail on that.
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
    with open(path, "w") as fh:
        fh.write(value)
