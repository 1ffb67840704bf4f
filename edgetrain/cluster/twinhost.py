"""The device twins of a cluster's real Jetson nodes, in one host process (`cluster up`
starts it as the component `twins`): each twin animates the tree that its node's mount
namespace grafts in at the Jetson paths (`nodefs.py`), as `edgetrain device sim` would on the
host of a kind cluster.

    python -m edgetrain.cluster.twinhost READY_FILE BOARD=ROOT [BOARD=ROOT ...]

It builds every tree, gives it to the GPU device group (as a virtual node's twin), writes
READY_FILE and runs until SIGTERM or SIGINT."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from edgetrain.api.pod_security import JETSON_DEVICE_GID
from edgetrain.cluster.twin import SimTwin, share_with_group


def run(ready: Path, twins: list[tuple[str, Path]]) -> None:
    """Start each twin, say so in `ready`, stop them all on a signal."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    running = []
    try:
        for board, root in twins:
            running.append(SimTwin(board, root))
            share_with_group(root, JETSON_DEVICE_GID)
        ready.write_text("".join(f"{b}={r}\n" for b, r in twins))
        stop.wait()
    finally:
        for twin in running:
            twin.close()


def main(argv: list[str]) -> int:
    """READY_FILE BOARD=ROOT ...; exit 2 on a malformed argument."""
    if len(argv) < 2 or not all("=" in a for a in argv[1:]):
        print("usage: python -m edgetrain.cluster.twinhost READY_FILE BOARD=ROOT ...",
              file=sys.stderr)
        return 2
    twins = [(a.split("=", 1)[0], Path(a.split("=", 1)[1])) for a in argv[1:]]
    run(Path(argv[0]), twins)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
