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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgetrain import __version__
from edgetrain.cluster import KubeClient, LocalCluster, api_path
from edgetrain.cluster.hostnet import NodeNetwork, cannot_run_kubelet, claim_network, remove_links
from edgetrain.cluster.images import ImportResult, import_project_images, podman_ref
from edgetrain.cluster.jetsons import JetsonFleet, teardown_jetsons
from edgetrain.cluster.nodes import VNodeSpec
from edgetrain.cluster.nsnode import NsNode
from edgetrain.cluster.realnode import missing_binaries
from tests.helpers import project_image_up_to_date, skip_here_fail_in_ci


def unavailable() -> str | None:
    """Why this host cannot run real nodes (one line), or None."""
    reason = cannot_run_kubelet()
    if reason is None and missing_binaries():
        reason = f"{', '.join(missing_binaries())} not built (`make cluster-bins`)"
    return reason


def skip_or_fail_without_kubelets() -> None:
    """Skip (fail in CI) where this host cannot run a kubelet."""
    skip_here_fail_in_ci(unavailable(), "no real node in CI", "this host cannot run a real node")


@dataclass
class RealCluster:
    """The control plane and its real nodes, by name."""

    cluster: LocalCluster
    fleet: JetsonFleet
    kube: KubeClient
    images: list[ImportResult]
    held: set[tuple[str, str]] = field(default_factory=set)  # (node, image) imported on demand

    def missing_images(self) -> list[str]:
        """The images a node was to hold that podman did not have, each with why."""
        return [f"{r.ref}: {r.missing}" for r in self.images if r.missing]

    def node(self, name: str) -> NsNode:
        return next(n for n in self.fleet.nodes if n.name == name)

    def import_images(self, name: str, images: Sequence[str], platform: str) -> None:
        """More images into one node (what only that node needs), streamed from podman: no
        archive on disk beside containerd's two copies."""
        node = self.node(name)
        self.images += import_project_images(node.ctr(), node.dir / "image-exports",
                                             __version__, images, platform)

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.fleet.nodes]

    def need(self, names: Sequence[str], images: Sequence[str], platform: str) -> None:
        """`images` in each of the nodes `names`, imported the first time a test asks (disk is
        scarce: each node holds only what its tests run); fails naming what podman lacks."""
        for name in names:
            todo = [i for i in images if (name, i) not in self.held]
            if todo:
                before = len(self.images)
                self.import_images(name, todo, platform)
                missing = [f"{r.ref}: {r.missing}" for r in self.images[before:] if r.missing]
                assert not missing, f"images podman lacks (`make images-local`): {missing}"
                self.held.update((name, i) for i in todo)


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
        with (cluster.client() as kube,
              real_nodes(cluster, kube, net, specs, arch, images, timeout_s, log,
                         **start) as real):
            yield real
    finally:
        cluster.stop()
        remove_links(net)


@contextlib.contextmanager
def real_nodes(cluster: LocalCluster, kube: KubeClient, net: NodeNetwork,
               specs: Sequence[VNodeSpec], arch: str = "amd64",
               images: Sequence[str] = ("node-agent",), timeout_s: float = 240.0,
               log: Callable[[str], None] = print, **start: Any) -> Iterator[RealCluster]:
    """One real node per spec on a running control plane whose `kubernetes` Service is on
    `net` (a claimed slot's), `images` imported; the nodes torn down on exit. They live in the
    control plane's folder, beside its PKI."""
    fleet = JetsonFleet(cluster.run_dir, net, cluster.ports["apiserver"], arch)
    try:
        got = fleet.start(specs, kube, images, __version__, timeout_s, log, **start)
        yield RealCluster(cluster, fleet, kube, got)
    finally:
        teardown_jetsons(cluster.run_dir)


def build_images(names: Sequence[str]) -> None:
    """The project's images built from this tree as `make images-core` builds them (a no-op
    when each one's stamp names these sources): an image from older sources would test older
    code (build-images.sh builds one image at a time per podman store).
    EDGETRAIN_TEST_BUILD_IMAGES=0 uses the images podman holds as they are (a run whose
    images were just built, or that waits behind a busy host lock)."""
    if os.environ.get("EDGETRAIN_TEST_BUILD_IMAGES", "1") == "0":
        lacking = [n for n in names if podman_ref(n, __version__) is None
                   and podman_ref(n, f"{__version__}-amd64") is None
                   and podman_ref(n, f"{__version__}-arm64") is None]
        assert not lacking, f"podman lacks {lacking} (`make images-local` builds them)"
        return
    for name in names:
        project_image_up_to_date(name)


@contextlib.contextmanager
def more_nodes(cluster: LocalCluster, kube: KubeClient, run_dir: Path,
               specs: Sequence[VNodeSpec], arch: str, images: Sequence[str],
               timeout_s: float = 300.0, **start: Any) -> Iterator[JetsonFleet]:
    """Real nodes beyond a session's, on a slot of their own (a slot holds at most seven), for
    a test that takes one down; on exit they stop and their Nodes and pods are deleted (no
    kubelet is left to confirm a deletion)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    net = claim_network()
    # The cluster's CA signs their certificates; they reach the API server at the address its
    # certificate names (the cluster's slot's, not theirs).
    fleet = JetsonFleet(run_dir, net, cluster.ports["apiserver"], arch,
                        pki_dir=cluster.pki.dir, api_ip=cluster.api_service_ip)
    try:
        got = fleet.start(specs, kube, images, __version__, timeout_s, lambda _m: None, **start)
        missing = [f"{r.ref}: {r.missing}" for r in got if r.missing]
        assert not missing, f"images podman lacks (`make images-local`): {missing}"
        yield fleet
    finally:
        teardown_jetsons(run_dir)
        remove_links(net)
        for spec in specs:
            forget_node(kube, spec.name)


def forget_node(kube: KubeClient, name: str) -> None:
    """Delete a Node whose kubelet is gone, and its pods without waiting for it."""
    kube.delete_ignore_missing(api_path("v1", "nodes", name=name))
    for pod in kube.get("/api/v1/pods", fieldSelector=f"spec.nodeName={name}")["items"]:
        meta = pod["metadata"]
        kube.delete_ignore_missing(
            api_path("v1", "pods", meta["namespace"], meta["name"]),
            {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
