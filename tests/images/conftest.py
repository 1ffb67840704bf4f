"""Reuse the control-plane fixtures (one cluster per session) for the image tests."""

from tests.cluster.conftest import cluster, kube, namespace, repo_root, vnodes

__all__ = ["cluster", "kube", "namespace", "repo_root", "vnodes"]
