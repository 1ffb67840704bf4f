"""Cluster fixtures: one real control plane and one set of virtual nodes per test session,
and a fresh namespace per test. Registered once, by tests/conftest.py: a conftest that
imported them again would define a second session fixture, that is a second cluster."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgetrain.api.pod_security import LABEL_POD_SECURITY_ENFORCE, POD_SECURITY_RESTRICTED
from edgetrain.cluster import KubeClient, LocalCluster, VNodeAgent, api_path, node_specs

Obj = dict[str, Any]

# The session's virtual nodes: two Jetson boards and two GPU servers (an estimate's runs
# spread over both: tests/operator/test_e2e.py).
JETSON_COUNTS = {"jetson-nano": 1, "jetson-orin-nano": 1}
SERVERS = 2


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok on 127.0.0.1."""
    local = LocalCluster(tmp_path_factory.mktemp("k8s"))
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
def vnodes(cluster: LocalCluster, kube: KubeClient, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[VNodeAgent]:
    """Virtual Jetson nodes and virtual GPU servers, Ready, running their pods locally."""
    agent = VNodeAgent(
        kube,
        node_specs(JETSON_COUNTS, SERVERS, prefix="vn"),
        tmp_path_factory.mktemp("vnodes"),
        restart_backoff_s=0.5,  # keep restart tests quick; the kubelet uses 10 s
        max_backoff_s=2.0,
        cluster_ca=cluster.pki,
    )
    agent.start()
    try:
        agent.wait_ready()
        yield agent
    finally:
        agent.stop()


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


def nfs_claim_manifests(namespace: str, export: Path, claim: str = CHECKPOINT_CLAIM,
                        server: str = "127.0.0.1") -> tuple[Obj, Obj]:
    """A ReadWriteMany PV exporting `export` over NFS and the claim in `namespace` bound to it
    (examples/checkpoint-storage.yaml's shape: what an NFS server is to a real fleet)."""
    pv_name = f"{claim}-{namespace}-{uuid.uuid4().hex[:5]}"[-253:]
    pv: Obj = {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                 "claimRef": {"namespace": namespace, "name": claim},
                 "nfs": {"server": server, "path": str(export)}},
    }
    pvc: Obj = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "volumeName": pv_name, "resources": {"requests": {"storage": "1Gi"}}},
    }
    return pv, pvc


@contextlib.contextmanager
def nfs_claim(kube: KubeClient, namespace: str, export: Path, claim: str = CHECKPOINT_CLAIM,
              server: str = "127.0.0.1", wait: bool = True) -> Iterator[str]:
    """Create `nfs_claim_manifests` (`wait`: until the PV controller binds them; a pod using
    the claim waits for that anyway); delete the PV on exit (the claim goes with its
    namespace)."""
    pv, pvc = nfs_claim_manifests(namespace, export, claim, server)
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
