"""Cluster fixtures: one real control plane and one set of real nodes per test session (each
node a kubelet with containerd in namespaces of its own: tests/cluster/realnodes.py), and a
fresh namespace per test. Registered once, by tests/conftest.py: a conftest that imported them
again would define a second session fixture, that is a second cluster. Under `pytest -n` each
worker's session has its own, on a network slot claimed host-wide."""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgetrain.api.pod_security import LABEL_POD_SECURITY_ENFORCE, POD_SECURITY_RESTRICTED
from edgetrain.cluster import KubeClient, LocalCluster, api_path, node_specs
from edgetrain.cluster.hostnet import NodeNetwork, claim_network, remove_links
from tests.cluster.realnodes import (
    RealCluster,
    build_images,
    real_nodes,
    skip_or_fail_without_kubelets,
    unavailable,
)

Obj = dict[str, Any]

# The session's real nodes: two Jetson boards and two GPU servers, named as `cluster up` names
# them. Their Jetsons run natively as amd64 (no emulated-arch label): QEMU multiplies each
# pod's torch import and training, and the layer took 34 min so (docs/cluster.md, "The e2e
# layer"). The README block, tests/cluster/test_jetson_real.py and the fault suite run arm64
# Jetsons under QEMU; EDGETRAIN_TEST_JETSON_ARCH=arm64 runs this layer so too.
JETSON_COUNTS = {"jetson-nano": 1, "jetson-orin-nano": 1}
SERVERS = 2
NANO, ORIN = "jetson-nano-0", "jetson-orin-nano-0"
SERVER_NAMES = tuple(f"gpu-server-{i}" for i in range(SERVERS))
JETSON_ARCH = os.environ.get("EDGETRAIN_TEST_JETSON_ARCH", "amd64")
# The trainer for the Jetsons' architecture: arm64, the Jetson's CPU variant; amd64, the CPU
# estimator, which carries the same entry points (5.1 GB: PyPI has no CPU-only x86-64 torch).
TRAINER = {"arm64": "trainer-cpu", "amd64": "estimator-cpu"}[JETSON_ARCH]
ESTIMATOR = "estimator-cpu"
# The chart's agent selects arm64 nodes, as Jetsons are; amd64 test Jetsons are selected by
# their own architecture (a later --set wins over the chart's default and any --set-json).
FLEET_CHART_SETS: tuple[str, ...] = (
    () if JETSON_ARCH == "arm64"
    else ("--set", f"agent.nodeSelector.kubernetes\\.io/arch={JETSON_ARCH}"))
# The one server that holds the estimator (GBs) and so takes the estimate pods: the operator's
# serverSelector sends them there.
ESTIMATES_LABEL = {"edgetrain.io/estimates": "here"}
NODE_TIMEOUT_S = 300.0  # to Ready; the image stores are made before, outside it


@pytest.fixture(scope="session")
def slot() -> Iterator[NodeNetwork | None]:
    """The session's network slot, claimed host-wide (None where no kubelet can run here)."""
    if unavailable() is not None:
        yield None
        return
    net = claim_network()
    try:
        yield net
    finally:
        remove_links(net)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, slot: NodeNetwork | None,
            ) -> Iterator[LocalCluster]:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok on 127.0.0.1,
    its `kubernetes` Service on the slot's address (which the nodes' pods reach)."""
    local = LocalCluster(tmp_path_factory.mktemp("k8s"),
                         **({"service_cidr": slot.service_cidr} if slot else {}))
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def kube(cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of the session cluster."""
    with cluster.client() as client:
        yield client


@pytest.fixture(scope="session")
def real_fleet(cluster: LocalCluster, kube: KubeClient, slot: NodeNetwork | None,
               checkpoint_root: Path) -> Iterator[RealCluster]:
    """The session's real Jetsons and GPU servers, Ready, with their images from the image
    stores (docs/cluster.md, "Image stores"; built from this tree first): the Jetsons the node
    agent and the trainer, the servers the operator, the first also the CPU estimator."""
    skip_or_fail_without_kubelets()
    assert slot is not None
    build_images(("node-agent", TRAINER, "operator", ESTIMATOR))
    specs = node_specs(JETSON_COUNTS, SERVERS, prefix="")
    jetson_images, server_images = ("node-agent", TRAINER), ("operator",)
    with real_nodes(cluster, kube, slot, specs, JETSON_ARCH, jetson_images, NODE_TIMEOUT_S,
                    lambda _m: None, shared_dirs=(str(checkpoint_root),),
                    server_images=server_images,
                    node_images={SERVER_NAMES[0]: (*server_images, ESTIMATOR)}) as real:
        missing = real.missing_images()
        assert not missing, f"images podman lacks (`make images-local` builds them): {missing}"
        real.held.update({(n, i) for n in (NANO, ORIN) for i in jetson_images}
                         | {(n, i) for n in SERVER_NAMES for i in server_images}
                         | {(SERVER_NAMES[0], ESTIMATOR)})
        kube.patch(api_path("v1", "nodes", name=SERVER_NAMES[0]),
                   {"metadata": {"labels": ESTIMATES_LABEL}})
        yield real


@pytest.fixture(scope="session")
def checkpoint_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint root every node sees at this path (a hostPath volume: the kernel here has
    no NFS client), writable by the worker UID 65532 the pods run as."""
    root = tmp_path_factory.mktemp("checkpoints")
    root.chmod(0o777)
    return root


@pytest.fixture(scope="session")
def trainer_images(real_fleet: RealCluster) -> RealCluster:
    """The Jetsons hold the trainer and the node agent."""
    real_fleet.need([NANO, ORIN], ("node-agent", TRAINER), f"linux/{JETSON_ARCH}")
    return real_fleet


@pytest.fixture(scope="session")
def estimator_image(real_fleet: RealCluster) -> RealCluster:
    """The first server holds the CPU estimator (the one server the estimate pods go to)."""
    real_fleet.need([SERVER_NAMES[0]], (ESTIMATOR,), "linux/amd64")
    return real_fleet


@pytest.fixture
def namespace(kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace for one test (with its default ServiceAccount), deleted afterwards."""
    stem = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    with temporary_namespace(kube, f"{stem}-{uuid.uuid4().hex[:5]}") as name:
        yield name


@contextlib.contextmanager
def temporary_namespace(kube: KubeClient, name: str) -> Iterator[str]:
    """Create namespace `name`, wait for its default ServiceAccount, delete it on exit."""
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": name}})
    # The ServiceAccount admission plugin rejects pods until KCM has made `default`.
    kube.wait_for(api_path("v1", "serviceaccounts", name, "default"), lambda _sa: True,
                  timeout_s=30, what="default ServiceAccount")
    try:
        yield name
    finally:
        kube.delete_ignore_missing(api_path("v1", "namespaces", name=name))


CHECKPOINT_CLAIM = "edgetrain-checkpoints"


def hostpath_claim_manifests(namespace: str, path: Path, claim: str = CHECKPOINT_CLAIM,
                             ) -> tuple[Obj, Obj]:
    """A ReadWriteMany PV of a hostPath every node shares, and the claim in `namespace` bound to
    it (examples/checkpoint-storage-local.yaml's shape)."""
    pv_name = f"{claim}-{namespace}-{uuid.uuid4().hex[:5]}"[-253:]
    pv: Obj = {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                 "claimRef": {"namespace": namespace, "name": claim},
                 "hostPath": {"path": str(path), "type": "Directory"}},
    }
    pvc: Obj = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "volumeName": pv_name, "resources": {"requests": {"storage": "1Gi"}}},
    }
    return pv, pvc


@contextlib.contextmanager
def hostpath_claim(kube: KubeClient, namespace: str, path: Path, claim: str = CHECKPOINT_CLAIM,
                   wait: bool = True) -> Iterator[str]:
    """Create `hostpath_claim_manifests` (`wait`: until the PV controller binds them; a pod
    using the claim waits for that anyway); delete the PV on exit (the claim goes with its
    namespace)."""
    pv, pvc = hostpath_claim_manifests(namespace, path, claim)
    kube.create("/api/v1/persistentvolumes", pv)
    try:
        kube.create(api_path("v1", "persistentvolumeclaims", namespace), pvc)
        if wait:
            kube.wait_for(api_path("v1", "persistentvolumeclaims", namespace, claim),
                          lambda c: (c.get("status") or {}).get("phase") == "Bound",
                          timeout_s=60, what=f"claim {claim} Bound")
        yield claim
    finally:
        kube.delete_ignore_missing(api_path("v1", "persistentvolumes",
                                            name=pv["metadata"]["name"]))


def enforce_pod_security(kube: KubeClient, name: str, level: str = POD_SECURITY_RESTRICTED,
                         ) -> None:
    """Label namespace `name` to enforce a Pod Security level (`restricted`: what a cluster
    admin sets for job namespaces, and the README does)."""
    kube.patch(api_path("v1", "namespaces", name=name),
               {"metadata": {"labels": {LABEL_POD_SECURITY_ENFORCE: level}}}, "merge")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The source checkout."""
    return Path(__file__).resolve().parents[2]
