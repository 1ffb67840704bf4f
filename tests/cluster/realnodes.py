"""A control plane with real namespaced nodes, for tests (docs/cluster.md, "Faults on real
nodes"): what `cluster up --jetson-runtime real` starts, attached to the test process.

The control plane is the test's own: a pod of a real node reaches the API server at the
`kubernetes` Service's address, which must be the claimed slot's (198.19.<slot>.1, relayed on
this host); the session's control plane serves its Service at 10.0.0.1, which no node routes.
The slot is claimed under the host-wide lock (`hostnet.claim_network`), and names, cgroup
roots and interfaces carry it, so these nodes run beside another xdist worker's, beside `cluster
up` (tests/test_readme.py) and beside the host's real server node."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from edgetrain import __version__
from edgetrain.cluster import KubeClient, LocalCluster
from edgetrain.cluster.hostnet import cannot_run_kubelet, claim_network, remove_links
from edgetrain.cluster.images import ImportResult, import_project_images
from edgetrain.cluster.jetsons import JetsonFleet, teardown_jetsons
from edgetrain.cluster.nodes import VNodeSpec
from edgetrain.cluster.nsnode import NsNode
from edgetrain.cluster.realnode import missing_binaries


def unavailable() -> str | None:
    """Why this host cannot run real nodes (one line), or None."""
    reason = cannot_run_kubelet()
    if reason is None and missing_binaries():
        reason = f"{', '.join(missing_binaries())} not built (`make cluster-bins`)"
    return reason


def skip_or_fail_without_kubelets() -> None:
    """Skip (fail in CI) where this host cannot run a kubelet."""
    reason = unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"no real node in CI: {reason}")
        pytest.skip(f"this host cannot run a real node: {reason}")


@dataclass
class RealCluster:
    """The control plane and its real nodes, by name."""

    cluster: LocalCluster
    fleet: JetsonFleet
    kube: KubeClient
    images: list[ImportResult]

    def missing_images(self) -> list[str]:
        """The images a node was to hold that podman did not have, each with why."""
        return [f"{r.ref}: {r.missing}" for r in self.images if r.missing]

    def node(self, name: str) -> NsNode:
        return next(n for n in self.fleet.nodes if n.name == name)

    def import_images(self, name: str, images: Sequence[str], platform: str) -> None:
        """More images into one node (what only that node needs)."""
        node = self.node(name)
        self.images += import_project_images(node.ctr(), node.dir / "image-exports",
                                             __version__, images, platform)


@contextlib.contextmanager
def real_cluster(run_dir: Path, specs: Sequence[VNodeSpec], arch: str = "amd64",
                 images: Sequence[str] = ("node-agent",), timeout_s: float = 240.0,
                 log: Callable[[str], None] = print, **start: Any) -> Iterator[RealCluster]:
    """A control plane on a claimed slot's network and one real node per spec (amd64: native,
    labelled as such; arm64: under QEMU), `images` imported from podman; all removed on exit
    (`jetson_leftovers` is then empty). `start`: more of `JetsonFleet.start`'s options."""
    net = claim_network()
    cluster = LocalCluster(run_dir, service_cidr=net.service_cidr)
    try:
        cluster.start()
        fleet = JetsonFleet(run_dir, net, cluster.ports["apiserver"], arch)
        with cluster.client() as kube:
            try:
                got = fleet.start(specs, kube, images, __version__, timeout_s, log, **start)
                yield RealCluster(cluster, fleet, kube, got)
            finally:
                teardown_jetsons(run_dir)
    finally:
        cluster.stop()
        remove_links(net)
