"""Idle fake nodes managed by kwok (annotation-selected), for scale tests."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from edgetrain.api.keys import GPU_RESOURCE, LABEL_NODE_KIND, LABEL_VIRTUAL
from edgetrain.cluster.boards import profile
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


def board_node(name: str, board: str, *, pods: int = 110, gpus: int | None = None) -> Obj:
    """A kwok Node labelled like a virtual node of `board` (device model, L4T, node kind), with
    no taint: pods scheduled to it get kwok's simulated status, and nothing runs."""
    prof = profile(board)
    capacity = {**prof.capacity(), "pods": str(pods)}
    if gpus is not None:
        capacity[GPU_RESOURCE] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {**prof.annotations(), KWOK_ANNOTATION: "fake",
                            "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {**prof.labels(name), "type": "kwok"},
        },
        "status": {
            "allocatable": capacity,
            "capacity": capacity,
            "nodeInfo": {"kubeletVersion": "fake", "architecture": prof.arch,
                         "operatingSystem": "linux", "osImage": prof.os_image_text,
                         "kernelVersion": prof.kernel},
        },
    }


def create_nodes(client: KubeClient, bodies: list[Obj], workers: int = 8) -> None:
    """Create Nodes in parallel (existing ones are kept)."""

    def create(body: Obj) -> None:
        try:
            client.create("/api/v1/nodes", body)
        except KubeApiError as exc:
            if exc.code != 409:
                raise

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(create, bodies))


def create_idle_nodes(client: KubeClient, count: int, prefix: str = "kwok-idle",
                      workers: int = 8) -> list[str]:
    """Create `count` kwok nodes (existing ones are kept); returns their names."""
    names = [f"{prefix}-{i}" for i in range(count)]
    create_nodes(client, [idle_node(n) for n in names], workers)
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
