"""Write kubeconfig files for the local cluster (reading any kubeconfig is `edgetrain.kube`)."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from edgetrain.cluster.pki import write_atomic


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_crt: Path,
    client_crt: Path,
    client_key: Path,
    user: str,
    cluster_name: str = "edgetrain",
) -> Path:
    """Write a self-contained kubeconfig (certificates embedded, mode 0600)."""

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster_name,
                "cluster": {"server": server, "certificate-authority-data": b64(ca_crt)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(client_crt),
                    "client-key-data": b64(client_key),
                },
            }
        ],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": cluster_name,
        "preferences": {},
    }
    write_atomic(path, yaml.safe_dump(doc, sort_keys=False).encode())
    return path
