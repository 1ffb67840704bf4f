"""Idle fake nodes managed by kwok (annotation-selected), for scale tests."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from edgetrain.api.keys import LABEL_NODE_KIND, LABEL_VIRTUAL
from edgetrain.kube import KubeApiError, KubeClient, Obj, node_ready

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
IDLE_SELECTOR = f"{LABEL_NODE_KIND}=idle"


def idle_node(name: str) -> Obj:
    """A Node kwok will manage: annotated, tainted so real workloads stay off it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                LABEL_NODE_KIND: "idle",
                LABEL_VIRTUAL: "true",
            },
        },
        "spec": {"taints": [{"key": KWOK_ANNOTATION, "value": "fake", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "nodeInfo": {"kubeletVersion": "fake", "architecture": "amd64",
                         "operatingSystem": "linux"},
        },
    }


def create_idle_nodes(client: KubeClient, count: int, prefix: str = "kwok-idle",
                      workers: int = 8) -> list[str]:
    """Create `count` kwok nodes (existing ones are kept); returns their names."""
    names = [f"{prefix}-{i}" for i in range(count)]

    def create(name: str) -> None:
        try:
            client.create("/api/v1/nodes", idle_node(name))
        except KubeApiError as exc:
            if exc.code != 409:
                raise

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(create, names))
    return names


def count_ready(client: KubeClient, selector: str = IDLE_SELECTOR) -> tuple[int, int]:
    """(ready, total) among nodes matching `selector`."""
    items = client.get("/api/v1/nodes", labelSelector=selector).get("items", [])
    return sum(1 for n in items if node_ready(n)), len(items)


def wait_ready(client: KubeClient, count: int, timeout_s: float = 300.0,
               selector: str = IDLE_SELECTOR) -> float:
    """Block until `count` matching nodes are Ready; returns the seconds it took."""
    start = time.monotonic()
    ready = total = 0
    while time.monotonic() - start < timeout_s:
        ready, total = count_ready(client, selector)
        if ready >= count:
            return time.monotonic() - start
        time.sleep(0.5)
    raise TimeoutError(f"only {ready}/{total} kwok nodes Ready after {timeout_s:.0f} s "
                       "(is the kwok component running? see logs/kwok.log)")


def delete_idle_nodes(client: KubeClient, selector: str = IDLE_SELECTOR) -> None:
    """Delete every idle kwok node (one deletecollection call)."""
    client.delete("/api/v1/nodes", labelSelector=selector)
