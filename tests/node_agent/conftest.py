"""Reuse the control-plane fixtures (one cluster and one set of virtual nodes per session)."""

from tests.cluster.conftest import cluster, kube, namespace, repo_root, vnodes

__all__ = ["cluster", "kube", "namespace", "repo_root", "vnodes"]
