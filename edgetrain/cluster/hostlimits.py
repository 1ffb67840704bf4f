"""Host limits that many kubelets on one host outgrow: every kubelet and containerd holds inotify
instances (cAdvisor, config and log watches), and the kernel's default of 128 per user is spent
by about a dozen real nodes; a kubelet then fails with `inotify_init: too many open files`.
kind's documentation gives the same advice for many kind nodes on one host."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

PROC_INOTIFY = Path("/proc/sys/fs/inotify")
# kind's known-issues page: 512 instances, 524288 watches.
INOTIFY_MINIMUMS = {"max_user_instances": 512, "max_user_watches": 524288}


def raise_inotify_limits(log: Callable[[str], None] = lambda _m: None,
                         root: Path = PROC_INOTIFY) -> dict[str, tuple[int, int]]:
    """Raise each inotify limit below its minimum to it (never lower one); returns what changed,
    {name: (old, new)}. Not put back by `cluster down`: another cluster may still need it."""
    changed: dict[str, tuple[int, int]] = {}
    for name, minimum in INOTIFY_MINIMUMS.items():
        path = root / name
        try:
            old = int(path.read_text().strip())
        except (OSError, ValueError):
            continue  # not Linux, or not this kernel's: nothing to raise
        if old >= minimum:
            continue
        try:
            path.write_text(f"{minimum}\n")
        except OSError as exc:
            log(f"fs.inotify.{name} is {old}, below the {minimum} that many kubelets need,"
                f" and cannot be raised ({exc.strerror}): run `sysctl -w fs.inotify.{name}="
                f"{minimum}` as root")
            continue
        changed[name] = (old, minimum)
        log(f"fs.inotify.{name} raised from {old} to {minimum} (every kubelet and containerd"
            " holds inotify instances)")
    return changed
