"""The Jetson nodes, kept current by one list-and-watch in a thread (an informer).

Not a kopf index: kopf gives every object it lists a readiness toggle of its own and re-checks
all of them whenever one is dropped, so indexing grows with the square of the objects and the
operator never finished starting on 5,000 nodes (`docs/benchmarks/operator.md`). Nodes are the
one kind that grows with the fleet rather than with the jobs, so they get this plain cache.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping

from edgetrain.api.keys import LABEL_DEVICE_MODEL
from edgetrain.kube import KubeClient, Obj, WatchExpired, api_path
from edgetrain.operator.phases import NodeInfo

log = logging.getLogger("edgetrain.operator")


class FleetWatch(Mapping[str, tuple[NodeInfo, ...]]):
    """Node name → (its NodeInfo,), read like the kopf indexes it replaces; thread-safe."""

    def __init__(self, kube: KubeClient, selector: str = LABEL_DEVICE_MODEL) -> None:
        self.kube = kube
        self.selector = selector
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeInfo] = {}
        self.listed = threading.Event()  # set once the first list is in
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 120.0) -> FleetWatch:
        """Start watching and wait for the first list (so no job sees an empty fleet)."""
        self._thread = threading.Thread(target=self._run, name="fleet-watch", daemon=True)
        self._thread.start()
        if not self.listed.wait(timeout_s):
            log.warning("nodes not listed within %.0f s; jobs wait for them", timeout_s)
        return self

    def stop(self) -> None:
        """End the watch (it returns within its current watch call)."""
        self._stop.set()

    def _run(self) -> None:
        path = api_path("v1", "nodes")
        while not self._stop.is_set():
            try:
                listing = self.kube.get(path, labelSelector=self.selector)
                self.replace(listing.get("items", []))
                rv = str(listing["metadata"].get("resourceVersion", ""))
                while not self._stop.is_set():
                    for kind, obj in self.kube.watch(path, rv,
                                                     params={"labelSelector": self.selector}):
                        rv = obj["metadata"].get("resourceVersion", rv)
                        if kind != "BOOKMARK":
                            self.apply(kind, obj)
            except WatchExpired:
                continue  # relist
            except Exception:  # an outage or a bad answer: say so, relist after a pause
                log.exception("node watch failed; listing the nodes again")
                self._stop.wait(1.0)

    def replace(self, nodes: list[Obj]) -> None:
        """A whole list: the fleet becomes exactly these nodes."""
        fresh = {str(n["metadata"]["name"]): NodeInfo.of(n) for n in nodes}
        with self._lock:
            self._nodes = fresh
        self.listed.set()

    def apply(self, kind: str, node: Obj) -> None:
        """One watch event (ADDED, MODIFIED, DELETED)."""
        name = str(node["metadata"]["name"])
        with self._lock:
            if kind == "DELETED":
                self._nodes.pop(name, None)
            else:
                self._nodes[name] = NodeInfo.of(node)

    # --- Mapping, as the reconciler reads the kopf indexes ---

    def __getitem__(self, name: str) -> tuple[NodeInfo, ...]:
        with self._lock:
            return (self._nodes[name],)

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._nodes))

    def __len__(self) -> int:
        with self._lock:
            return len(self._nodes)

    def values(self) -> list[tuple[NodeInfo, ...]]:  # type: ignore[override]
        """Every node, copied under the lock (one consistent snapshot)."""
        with self._lock:
            return [(n,) for n in self._nodes.values()]
