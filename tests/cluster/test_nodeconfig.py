"""A real node's containerd configuration: valid TOML, and the `nvidia` handler only on a
Jetson, running the same runtime as runc (the twin's device files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomllib

from edgetrain.cluster.nodeconfig import containerd_toml


def _runtimes(**kw: Any) -> dict[str, Any]:
    text = containerd_toml(root=Path("/r"), state=Path("/s"), socket=Path("/k.sock"),
                           opt=Path("/o"), runc="/node/bin/runc", runc_root=Path("/rr"),
                           cni_conf_dir=Path("/cni"), **kw)
    config = tomllib.loads(text)
    assert config["root"] == "/r" and config["plugins"]["io.containerd.server.v1.grpc"][
        "address"] == "/k.sock"
    return dict(config["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"])


def test_a_jetson_has_the_nvidia_handler_as_k3s_registers_it() -> None:
    assert set(_runtimes()) == {"runc"}
    jetson = _runtimes(nvidia=True)
    assert set(jetson) == {"runc", "nvidia"}
    assert jetson["nvidia"] == jetson["runc"]
    assert jetson["nvidia"]["options"]["BinaryName"] == "/node/bin/runc"
