"""Write kubeconfig files for the local cluster and read any kubeconfig into connection facts."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml

from edgetrain.cluster.pki import write_atomic


class KubeconfigError(ValueError):
    """A kubeconfig is missing, malformed or uses an auth method we do not support."""


@dataclass(frozen=True)
class KubeConfig:
    """What a client needs to talk to one API server."""

    server: str
    ca_pem: bytes | None = None
    insecure_skip_tls_verify: bool = False
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None
    token: str | None = None
    namespace: str = "default"
    source: Path | None = None


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


def _named(items: Any, name: str, kind: str, path: Path) -> dict[str, Any]:
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            return cast(dict[str, Any], item.get(kind) or {})
    raise KubeconfigError(f"{path}: no {kind} named {name!r}")


def _data_or_file(section: dict[str, Any], key: str, base: Path) -> bytes | None:
    data = section.get(f"{key}-data")
    if data:
        return base64.b64decode(data)
    file = section.get(key)
    if file:
        p = Path(os.path.expanduser(str(file)))
        return (p if p.is_absolute() else base / p).read_bytes()
    return None


def default_kubeconfig_path() -> Path:
    """$KUBECONFIG (first entry) or ~/.kube/config."""
    env = os.environ.get("KUBECONFIG", "")
    first = env.split(os.pathsep)[0] if env else ""
    return Path(first) if first else Path.home() / ".kube" / "config"


def load_kubeconfig(path: Path | None = None, context: str | None = None) -> KubeConfig:
    """Read server, CA, and client-cert or token auth from a kubeconfig file."""
    path = path or default_kubeconfig_path()
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise KubeconfigError(f"cannot read kubeconfig {path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise KubeconfigError(f"{path}: not a kubeconfig (expected a mapping)")
    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        raise KubeconfigError(f"{path}: no current-context and no --context given")
    ctx = _named(doc.get("contexts"), ctx_name, "context", path)
    cluster = _named(doc.get("clusters"), ctx.get("cluster", ""), "cluster", path)
    user = _named(doc.get("users"), ctx.get("user", ""), "user", path) if ctx.get("user") else {}
    base = path.parent
    if "exec" in user or "auth-provider" in user:
        raise KubeconfigError(
            f"{path}: user {ctx.get('user')!r} uses an exec/auth-provider plugin; "
            "use a kubeconfig with client certificates or a token (kind and k3s provide one)"
        )
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(user["tokenFile"]).read_text().strip()
    server = cluster.get("server")
    if not server:
        raise KubeconfigError(f"{path}: cluster {ctx.get('cluster')!r} has no server")
    return KubeConfig(
        server=str(server).rstrip("/"),
        ca_pem=_data_or_file(cluster, "certificate-authority", base),
        insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify", False)),
        client_cert_pem=_data_or_file(user, "client-certificate", base),
        client_key_pem=_data_or_file(user, "client-key", base),
        token=token,
        namespace=str(ctx.get("namespace") or "default"),
        source=path,
    )
